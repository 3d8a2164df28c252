"""``python manage.py workflows [NAME] [--all] [--json]``: the registered workflows, each
with its versions, steps (kind, retry, compensation) and required input. Internal ones
(benchmark and drill fixtures) only with ``--all`` or by name."""

import json

from django.core.management.base import CommandError

from runs.cli import arguments
from runs.cli.command import OperatorCommand
from runs.workflows import registry


def describe(workflow) -> dict:
    """One workflow version as plain data: ``{"name", "version", "description",
    "input": {field: type name}, "steps": [{"name", "kind", "max_attempts",
    "on_exhausted", "compensates", "compensable", "children_of" (the workflow a child
    step starts), "signal" (the signal a signal step waits for)}], "migrates_from": [int],
    "internal": bool}``."""
    return {
        "name": workflow.name,
        "version": workflow.version,
        "description": workflow.description,
        "input": {
            k: " or ".join(x.__name__ for x in (t if isinstance(t, tuple) else (t,)))
            for k, t in workflow.input_fields.items()
        },
        "steps": [
            {
                "name": s.name,
                "kind": s.kind,
                "max_attempts": s.retry.max_attempts,
                "on_exhausted": s.on_exhausted,
                "compensates": s.compensate is not None,
                "compensable": s.compensable,
                "children_of": s.options["workflow"] if s.kind == "child" else None,
                "signal": s.options["signal"] if s.kind == "signal" else None,
            }
            for s in workflow.steps
        ],
        "migrates_from": sorted(workflow.migrate_from),
        "internal": workflow.internal,
    }


class Command(OperatorCommand):
    help = "List the registered workflows: name, versions, steps and description."

    def add_arguments(self, parser):
        parser.add_argument(
            "name",
            nargs="?",
            type=arguments.required_text,
            help="show only this workflow (all of its versions)",
        )
        parser.add_argument(
            "--all", action="store_true", help="include internal benchmark and drill workflows"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON array")

    def handle(self, *args, name: str | None, **options):
        workflows = registry.all_workflows()
        if not name and not options["all"]:
            workflows = [w for w in workflows if not w.internal]
        if name:
            workflows = [w for w in workflows if w.name == name]
            if not workflows:
                raise CommandError(
                    f"unknown workflow {name}; registered workflows: " + ", ".join(registry.names())
                )
        rows = [describe(w) for w in workflows]
        if options["json"]:
            self.stdout.write(json.dumps(rows))
            return
        for row in rows:
            needs = ", ".join(f"{k} ({t})" for k, t in row["input"].items()) or "nothing"
            self.stdout.write(f"{row['name']}@{row['version']}: {row['description']}")
            self.stdout.write(f"  input: {needs}")
            steps = []
            for s in row["steps"]:
                marks = [
                    m
                    for m, on in (
                        ("approval", s["kind"] == "approval"),
                        ("map: one branch per item", s["kind"] == "map"),
                        (f"child runs of {s['children_of']}", s["children_of"] is not None),
                        (f"waits for signal {s['signal']}", s["signal"] is not None),
                        ("compensated", s["compensates"]),
                        ("not compensable", not s["compensable"]),
                    )
                    if on
                ]
                steps.append(s["name"] + (f" ({', '.join(marks)})" if marks else ""))
            self.stdout.write("  steps: " + " -> ".join(steps))
