"""``runs list [--status S ...] [--workflow W] [--version N] [--owner U] [--thread T]
[--q TEXT] [--parent RUN] [--stuck | --not-stuck] [--has-unknown | --no-unknown]
[--created-after ISO] [--created-before ISO] [--updated-after ISO] [--updated-before ISO]
[--sort KEY] [--limit N] [--offset N] [--json]``: the console's runs list, with its filters."""

import json

from django.core.management.base import CommandError
from django.http import QueryDict

from runs.cli import arguments
from runs.cli.common import one_line
from runs.console.filters import RunFilter, unknown_step_exists
from runs.engine.service import ControlError, db_now, find_run
from runs.models import Run
from runs.states import RunStatus

help = "list runs, newest first, with the console's filters"

SORTS = ["created", "updated", "status", "workflow", "last_event"]


def add_arguments(parser):
    parser.add_argument(
        "--status",
        action="append",
        choices=RunStatus.values,
        metavar="STATUS",
        help="only runs in this state (repeat for several): " + ", ".join(RunStatus.values),
    )
    parser.add_argument(
        "--workflow", type=arguments.identifier("workflow"), help="only runs of this workflow name"
    )
    parser.add_argument(
        "--version", type=arguments.integer(1), help="only runs of this workflow version"
    )
    parser.add_argument(
        "--owner", type=arguments.required_text, help="only runs owned by this username"
    )
    parser.add_argument("--thread", type=arguments.thread_id, help="only runs of this thread id")
    parser.add_argument(
        "--q",
        metavar="TEXT",
        type=arguments.required_text,
        help="run id prefix, thread id or goal text",
    )
    parser.add_argument(
        "--parent",
        metavar="RUN",
        type=arguments.required_text,
        help="only the child runs of this run (its id or a prefix of at least 4 hex digits)",
    )
    stuck = parser.add_mutually_exclusive_group()
    stuck.add_argument(
        "--stuck", dest="stuck", action="store_const", const=True, help="only stuck runs"
    )
    stuck.add_argument(
        "--not-stuck", dest="stuck", action="store_const", const=False, help="no stuck runs"
    )
    unknown = parser.add_mutually_exclusive_group()
    unknown.add_argument(
        "--has-unknown",
        dest="has_unknown",
        action="store_const",
        const=True,
        help="only runs with a step whose outcome is unknown",
    )
    unknown.add_argument(
        "--no-unknown",
        dest="has_unknown",
        action="store_const",
        const=False,
        help="only runs without an unknown outcome",
    )
    for field in ("created", "updated"):
        for edge in ("after", "before"):
            parser.add_argument(
                f"--{field}-{edge}",
                metavar="DATE",
                type=arguments.required_text,
                help=f"only runs {field} on or {edge} this date (YYYY-MM-DD)",
            )
    parser.add_argument(
        "--sort",
        choices=SORTS + [f"-{s}" for s in SORTS],
        metavar="KEY",
        help="sort by " + ", ".join(SORTS) + " (prefix - for descending); default -created",
    )
    parser.add_argument(
        "--limit",
        type=arguments.integer(1, 500),
        default=50,
        help="at most this many runs (1..500, default 50)",
    )
    parser.add_argument(
        "--offset", type=arguments.integer(), default=0, help="skip this many runs first"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _query(options) -> QueryDict:
    query = QueryDict(mutable=True)
    query.setlist("status", options["status"] or [])
    for name, key in (
        ("workflow", "workflow"),
        ("version", "workflow_version"),
        ("owner", "owner"),
        ("thread", "thread"),
        ("q", "q"),
        ("parent", "parent"),
        ("created_after", "created_after"),
        ("created_before", "created_before"),
        ("updated_after", "updated_after"),
        ("updated_before", "updated_before"),
        ("sort", "o"),
    ):
        if options[name] is not None:
            query[key] = str(options[name])
    for name in ("stuck", "has_unknown"):
        if options[name] is not None:
            query[name] = "true" if options[name] else "false"
    return query


def handle(command, options):
    if options["parent"] is not None:
        # The parent is named as every run is: unknown or ambiguous is an error, not
        # an empty list.
        try:
            options["parent"] = str(find_run(options["parent"]).pk)
        except ControlError as exc:
            raise CommandError(f"--parent: {one_line(exc.message)} [{exc.code}]") from None
    queryset = (
        Run.objects.select_related("thread", "owner", "current_step")
        .annotate(has_unknown=unknown_step_exists())
        .order_by("-created_at", "-pk")
    )
    run_filter = RunFilter(_query(options), queryset=queryset, now=db_now())
    if not run_filter.is_valid():
        problems = "; ".join(
            f"{field}: {' '.join(errors)}" for field, errors in run_filter.errors.items()
        )
        raise CommandError(f"invalid filter: {problems} [invalid_filter]")
    runs = run_filter.qs
    total = runs.count()
    page = list(runs[options["offset"] : options["offset"] + options["limit"]])
    rows = [
        {
            "run_id": str(r.pk),
            "status": r.status,
            "workflow": r.workflow,
            "version": r.workflow_version,
            "thread_id": r.thread.thread_id,
            "owner": r.owner.get_username() if r.owner else None,
            "goal": r.goal,
            "current_step": r.current_step.name if r.current_step else None,
            "has_unknown": r.has_unknown,
            "parent_run": str(r.parent_run_id) if r.parent_run_id else None,
            "created_at": r.created_at.isoformat(),
            "updated_at": r.updated_at.isoformat() if r.updated_at else None,
        }
        for r in page
    ]
    if options["json"]:
        command.stdout.write(
            json.dumps({"count": total, "offset": options["offset"], "runs": rows})
        )
        return
    for r in rows:
        step = f" at {r['current_step']}" if r["current_step"] else ""
        unknown = " UNKNOWN-OUTCOME" if r["has_unknown"] else ""
        command.stdout.write(
            f"{r['run_id']}  {r['status']:<16} {r['workflow']}@{r['version']}{step}"
            f"  thread {r['thread_id']}{unknown}"
        )
    shown = f"{options['offset'] + 1}-{options['offset'] + len(rows)}" if rows else "none"
    command.stdout.write(f"{total} runs match; shown {shown}")
