"""``runs context RUN_ID [--step NAME] [--json]``: exactly what the model would receive,
part by part (system, summary covering 1..N, messages N+1.., this run's tool results)."""

import json

from django.core.management.base import CommandError

from runs.cli import arguments
from runs.cli.common import add_run_arguments, resolve_run
from runs.engine.service import assemble_context, open_step

help = "print the assembled model input of a run's step, with each part labelled"


def add_arguments(parser):
    add_run_arguments(parser)
    parser.add_argument(
        "--step",
        default=None,
        type=arguments.required_text,
        help="the step whose input to show (default: the run's open step, else its last step)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _default_step(run) -> str | None:
    from runs.models import Step

    step = open_step(run) or Step.objects.filter(run=run).order_by("-seq").first()
    return step.name if step else None


def handle(command, options):
    run = resolve_run(options)
    asked = options["step"]
    step = asked or _default_step(run)
    if asked and not run.steps.filter(name=asked).exists():
        from runs.workflows import registry

        try:
            known = registry.get(run.workflow, run.workflow_version).has(asked)
        except registry.UnknownWorkflow:
            known = False
        if not known:
            raise CommandError(f"run {run.pk} ({run.workflow}) has no step {asked!r}")
    assembled = assemble_context(run, step=step)
    if options["json"]:
        command.stdout.write(json.dumps(assembled.as_dict(), ensure_ascii=False))
        return
    out = command.stdout
    out.write(
        f"context of run {run.pk} at step {step or '-'} (history ends at message "
        f"{assembled.history_end})"
    )
    for part in assembled.parts:
        label = part["label"]
        if label == "system":
            out.write(f"[system]\n  {part['content']}")
        elif label == "summary":
            first, last = part["covers"]
            out.write(f"[summary covering {first}..{last}] ({part['tokens']} tokens)")
            for line in part["content"].splitlines():
                out.write(f"  {line}")
        else:
            title = "messages" if label == "messages" else "tool results (this run)"
            if part["messages"]:
                out.write(f"[{title} {part['messages'][0]['seq']}..{part['messages'][-1]['seq']}]")
            else:
                out.write(f"[{title}: none]")
            for m in part["messages"]:
                calls = ", ".join(
                    f"{c['name']}({json.dumps(c['arguments'])}) [{c['id']}]"
                    for c in m["tool_calls"]
                )
                extra = f" -> {calls}" if calls else ""
                reply_to = f" [result of {m['tool_call_id']}]" if m["tool_call_id"] else ""
                out.write(f"  #{m['seq']} {m['role']:<9}{reply_to} {m['content']}{extra}")
