"""``python manage.py approvals``: the approvals inbox and takeovers from the shell.

- ``approvals list [--all] [--json]``: pending approvals, those past their deadline
  shown EXPIRED (``--all``: every status);
- ``approvals decide ID approve|reject --comment TEXT --as USERNAME``;
- ``approvals takeovers [--all] [--json]``: open takeovers;
- ``approvals claim ID --as USERNAME``;
- ``approvals resolve ID resume|retry|mark_done|cancel --reason TEXT [--checkpoint NAME]
  [--evidence TEXT] [--result JSON] [--against-verify] [--as USERNAME]``.

Refusals exit non-zero with the engine's code in brackets, e.g. ``[decision_conflict]``.
"""

import json

from django.core.exceptions import PermissionDenied
from django.core.management.base import CommandError

from approvals import services
from approvals.desk import entry_points
from approvals.tool_calls import edited_calls
from runs.cli import arguments
from runs.cli.command import OperatorCommand
from runs.cli.common import cli_user, control_error, one_line, write_rows
from runs.engine.service import (
    IDS,
    ControlError,
    find_run,
    parse_id,
    unknown_id_message,
    with_shown_status,
)
from runs.models import Approval, Takeover


class Command(OperatorCommand):
    help = "List and decide approvals; list, claim and resolve takeovers."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        p = sub.add_parser("list", help="pending approvals")
        p.add_argument("--all", action="store_true", help="every status, newest first")
        _add_listing_options(p)
        p = sub.add_parser("decide", help="approve or reject an approval")
        # No argparse type: an ill-formed id names no approval (unknown_approval), as
        # on the console and the API, not a usage error.
        p.add_argument("approval_id", help="the approval's id (approvals list shows it)")
        # The engine refuses another word (invalid_decision), as from the console and API.
        # Optional here so that a missing one is the engine's invalid_decision too.
        p.add_argument("decision", nargs="?", help="approve or reject")
        p.add_argument("--comment", default="", help="why (recorded with the decision)")
        p.add_argument(
            "--arguments",
            default=None,
            type=arguments.json_object("invalid_arguments"),
            help="an agent's tool call: approve with these arguments (JSON object)",
        )
        p.add_argument(
            "--message",
            default="",
            help="an agent's tool call: reject and give the model this message instead",
        )
        p.add_argument(
            "--as",
            dest="username",
            required=True,
            type=arguments.required_text,
            help="the deciding user",
        )
        p = sub.add_parser("takeovers", help="open takeovers")
        p.add_argument("--all", action="store_true", help="resolved ones too")
        _add_listing_options(p)
        p = sub.add_parser("claim", help="take an open takeover on")
        _add_takeover_id(p)
        p.add_argument(
            "--as",
            dest="username",
            required=True,
            type=arguments.required_text,
            help="the operator claiming it (a user holding runs.operate_run)",
        )
        p = sub.add_parser("resolve", help="resolve an open takeover")
        _add_takeover_id(p)
        p.add_argument(
            "action",
            choices=services.RESOLUTIONS,
            help="resume, retry, mark_done or cancel (docs/control.md, Takeovers)",
        )
        # The engine refuses a missing reason (reason_required), as on every face.
        p.add_argument("--reason", default="", help="why (required; recorded on the event)")
        p.add_argument(
            "--checkpoint",
            default=None,
            type=arguments.identifier("checkpoint"),
            help="with resume: the checkpoint name",
        )
        p.add_argument("--evidence", default="", help="how you know (required for mark_done)")
        p.add_argument(
            "--result",
            default=None,
            type=arguments.json_value(),
            help="with mark_done: the step's output as JSON",
        )
        p.add_argument(
            "--against-verify",
            action="store_true",
            help="resolve although the latest verify answer says the opposite (recorded)",
        )
        p.add_argument(
            "--as",
            dest="username",
            default=None,
            type=arguments.required_text,
            help="actor user:NAME (default actor: cli)",
        )

    def handle(self, *args, subcommand: str, **options):
        try:
            getattr(self, f"do_{subcommand}")(options)
        except ControlError as exc:
            raise control_error(exc) from exc
        except PermissionDenied as exc:
            raise CommandError(one_line(f"{exc} [permission_denied]")) from exc

    # -- approvals ------------------------------------------------------------------
    def do_list(self, options):
        query = with_shown_status(Approval.objects.select_related("run", "step", "decided_by"))
        if not options["all"]:
            query = query.filter(status=Approval.Status.PENDING)
        rows = [_approval_row(a) for a in _listed(query, options)]
        write_rows(self.stdout, rows, options, nothing="no approvals", lines=_approval_lines)

    def do_decide(self, options):
        user = _user(options["username"])
        approval = _get(Approval, options["approval_id"], "approval")
        approval = services.decide(
            approval,
            decision=options["decision"],
            user=user,
            comment=options["comment"],
            arguments=options["arguments"],
            message=options["message"],
        )
        self.stdout.write(
            f"approval {approval.pk}: {approval.status} by "
            f"{approval.decided_by.get_username() if approval.decided_by else '-'}"
        )

    # -- takeovers ------------------------------------------------------------------
    def do_takeovers(self, options):
        query = Takeover.objects.all()
        if not options["all"]:
            query = query.filter(status=Takeover.Status.OPEN)
        rows = [_takeover_row(t) for t in _listed(query, options)]
        write_rows(self.stdout, rows, options, nothing="no takeovers", lines=_takeover_lines)

    def do_claim(self, options):
        takeover = services.claim_takeover(
            _get(Takeover, options["takeover_id"], "takeover"), _user(options["username"])
        )
        self.stdout.write(f"takeover {takeover.pk} claimed by {options['username']}")

    def do_resolve(self, options):
        actor = "cli"
        if options["username"]:
            actor = services.user_actor(_user(options["username"]))
        takeover = services.resolve_takeover(
            _get(Takeover, options["takeover_id"], "takeover"),
            action=options["action"],
            actor=actor,
            reason=options["reason"],
            checkpoint=options["checkpoint"],
            evidence=options["evidence"],
            result=options["result"],
            against_verify=options["against_verify"],
        )
        takeover.run.refresh_from_db()
        self.stdout.write(
            f"takeover {takeover.pk}: {takeover.status} ({takeover.resolution}); "
            f"run is {takeover.run.status}"
        )


def _add_takeover_id(parser) -> None:
    parser.add_argument("takeover_id", help="the takeover's id (approvals takeovers shows it)")


def _add_listing_options(parser) -> None:
    parser.add_argument(
        "--run",
        metavar="RUN_ID",
        type=arguments.required_text,
        help="only this run's (its id or a unique prefix)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON array")
    parser.add_argument(
        "--ids", action="store_true", help="print only the ids, one a line (for scripts)"
    )


def _listed(query, options):
    """``query`` newest first, narrowed to ``--run`` (``CommandError`` for an unknown or
    ambiguous id)."""
    if options["run"]:
        try:
            query = query.filter(run=find_run(options["run"]))
        except ControlError as exc:
            raise CommandError(f"--run: {one_line(exc.message)} [{exc.code}]") from None
    return query.order_by("-pk")


def _user(username: str):
    return cli_user(username)


#: The status whose rows an unknown id is answered with: the ones that can be acted on.
_ACTIONABLE = {Approval: Approval.Status.PENDING, Takeover: Takeover.Status.OPEN}


def _get(model, text: str, what: str):
    """The row of ``model`` whose id (of the kind ``what``) is ``text``; ``CommandError``
    with the kind's code (``[unknown_approval]``) and the actionable ids when ``text``
    is ill-formed (``parse_id``) or names no row."""
    pk = parse_id(text, what)
    row = None if pk is None else model.objects.filter(pk=pk).first()
    if row is None:
        status = _ACTIONABLE[model]
        ids = model.objects.filter(status=status).order_by("pk").values_list("pk", flat=True)
        listing = ", ".join(str(i) for i in ids[:20]) or "none"
        raise CommandError(
            f"{one_line(unknown_id_message(text, what))} [{IDS[what].code}]; "
            f"{status.lower()} {what}s: {listing}"
        )
    return row


def _approval_row(a: Approval) -> dict:
    row = {
        "id": a.pk,
        "run_id": str(a.run_id),
        "step": a.step.name,
        # Past its deadline but not swept yet: EXPIRED, it can no longer be decided.
        "status": getattr(a, "shown_status", a.status),
        "question": a.question,
        "reason": a.reason,
        "evidence": a.evidence,
        "decided_by": a.decided_by.get_username() if a.decided_by else None,
        "comment": a.comment,
        "expires_at": a.expires_at.isoformat() if a.expires_at else None,
    }
    evidence = a.evidence if isinstance(a.evidence, dict) else {}
    if evidence.get("kind") == "tool_call":
        # What the model asked and, once approved, what ran (the approver's edit, if any).
        edit = None
        if a.status == Approval.Status.APPROVED:
            edit = edited_calls(a.run_id).get(str(evidence.get("tool_call_id")))
        row["arguments_asked"] = evidence.get("arguments")
        row["arguments_ran"] = (
            (edit["to"] if edit else evidence.get("arguments"))
            if a.status == Approval.Status.APPROVED
            else None
        )
        row["arguments_edited"] = edit is not None
    return row


def _approval_lines(r: dict) -> list[str]:
    by = f" (by {r['decided_by']})" if r["decided_by"] else ""
    lines = [f"#{r['id']} {r['status']:<9} run {r['run_id']} step {r['step']}: {r['question']}{by}"]
    if r.get("arguments_edited"):
        lines.append(
            f"    arguments edited: ran {json.dumps(r['arguments_ran'])}; "
            f"the model asked {json.dumps(r['arguments_asked'])}"
        )
    return lines


def _takeover_row(t: Takeover) -> dict:
    return {
        "id": t.pk,
        "run_id": str(t.run_id),
        "status": t.status,
        "cause": t.cause,
        "reason": t.reason,
        "failed_at": t.failed_at,
        "suggested_action": t.suggested_action,
        "evidence": t.evidence,
        "done": t.done_summary,
        "checkpoints": entry_points(t),
        "resolution": t.resolution,
        "resolved_by": t.resolved_by,
    }


def _takeover_lines(r: dict) -> list[str]:
    return [
        f"#{r['id']} {r['status']:<8} {r['cause']:<26} run {r['run_id']} "
        f"at {r['failed_at'] or '-'}: {r['reason']}",
        f"    suggested: {r['suggested_action']}",
        f"    checkpoints: {', '.join(r['checkpoints']) or '-'}",
    ]
