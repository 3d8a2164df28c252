"""Console pages for waits: the signal form of a run that waits for one (operators and
approvers; the fields are built from the waiting step's JSON Schema) and the schedules
page (next tick times, last ticks and their runs; pause, resume, trigger now)."""

import uuid
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from runs.console.access import (
    DECIDE_PERM,
    OPERATE_PERM,
    actor_of,
    console_action,
    console_view,
    unstorable_input,
)
from runs.console.actions import back_url, perform
from runs.console.forms import InvalidInput, optional_json
from runs.engine.service import (
    deliver_signal,
    next_fire_times,
    number_problem,
    set_schedule_paused,
    timing_of,
    trigger_schedule,
    waiting_step,
)
from runs.models import Run, Schedule, ScheduleTick
from runs.workflows import registry

#: JSON Schema types the form has an input for.
SIMPLE_TYPES = ("string", "number", "integer", "boolean")


def signal_form(run: Run) -> dict[str, Any] | None:
    """The form for the signal ``run`` waits for: ``{signal, fields: [{name, type,
    required}], raw: bool, request_id}``; ``raw`` when the schema is not a flat object of
    simple types (one JSON field instead). ``None`` when the run waits for no signal."""
    step = waiting_step(run.pk, run.generation)
    return None if step is None else form_for(run, step.signal_name)


def form_for(run: Run, name: str) -> dict[str, Any]:
    """The form of the signal ``name`` as the run's workflow declares it (its first step
    waiting for ``name``; no schema: one JSON field), the same whether or not the run
    waits for it now, so a second submission of one form reads its payload alike."""
    declared = registry.get(run.workflow, run.workflow_version).signal_steps(name)
    schema = (declared[0].options["schema"] if declared else None) or {}
    props = schema.get("properties") if schema.get("type") == "object" else None
    fields = []
    if props:
        required = set(schema.get("required", []))
        for name, spec in props.items():
            kind = spec.get("type") if isinstance(spec, dict) else None
            if kind not in SIMPLE_TYPES:
                props = None
                break
            fields.append({"name": name, "type": kind, "required": name in required})
    return {
        "signal": name,
        "fields": fields if props else [],
        "raw": not props,
        "request_id": uuid.uuid4().hex,
    }


def payload_from_form(post, fields: list[dict]) -> dict[str, Any]:
    """The payload the form's ``payload.<name>`` inputs give, typed as the schema says;
    a blank optional field is left out. Raises ``InvalidInput`` for a number that is not
    one (the schema check in the engine does the rest)."""
    payload: dict[str, Any] = {}
    for field in fields:
        raw = (post.get(f"payload.{field['name']}") or "").strip()
        if field["type"] == "boolean":
            payload[field["name"]] = raw == "on"
            continue
        if not raw:
            continue
        if field["type"] in ("number", "integer"):
            try:
                value: Any = int(raw) if field["type"] == "integer" else float(raw)
            except ValueError:
                raise InvalidInput(f"{field['name']} must be a {field['type']}.") from None
            if number_problem(value) is not None:  # "nan" and "inf" parse as floats
                raise InvalidInput(f"{field['name']} must be a finite number.")
            payload[field["name"]] = value
        else:
            payload[field["name"]] = raw
    return payload


@login_required
@require_POST
def signal(request, run_id):
    """Deliver the signal the run waits for, with the form's payload, as the person
    (operators and approvers; 403 otherwise). The form's request id makes a second
    submission of the same form deliver nothing new."""
    if not (request.user.has_perm(OPERATE_PERM) or request.user.has_perm(DECIDE_PERM)):
        raise PermissionDenied("signals need runs.operate_run or runs.decide_approval")
    refused = unstorable_input(request)
    if refused is not None:
        return refused
    run = get_object_or_404(Run, pk=run_id)
    back = back_url(request, reverse("console:run", args=[run.pk]))
    name = request.POST.get("signal") or ""
    form = form_for(run, name)

    def call():
        if form["raw"]:
            payload = optional_json(request.POST, "payload", label="Payload")
        else:
            payload = payload_from_form(request.POST, form["fields"])
        return deliver_signal(
            run.pk,
            name,
            payload,
            request_id=request.POST.get("request_id") or None,
            actor=actor_of(request),
        )

    return perform(
        request,
        call,
        back=back,
        success=lambda d: f"Signal {name} "
        + ("taken by the waiting step." if d.consumed else "kept until the run waits for it."),
    )


@console_view
def schedule_list(request):
    """Every schedule with its next tick times and its last ticks (and their runs)."""
    rows = []
    for schedule in Schedule.objects.order_by("name"):
        rows.append(
            {
                "schedule": schedule,
                "timing": timing_of(schedule).describe(),
                "next": next_fire_times(schedule),
                "ticks": list(
                    ScheduleTick.objects.filter(schedule=schedule)
                    .select_related("run")
                    .order_by("-tick_at")[:5]
                ),
            }
        )
    return render(request, "console/schedules.html", {"rows": rows})


@console_action(OPERATE_PERM)
def schedule_action(request, name, action):
    """``pause``, ``resume`` or ``trigger`` the schedule ``name``."""
    back = reverse("console:schedules")

    def call():
        if action == "trigger":
            return trigger_schedule(name, actor_of(request))
        if action in ("pause", "resume"):
            return set_schedule_paused(name, action == "pause")
        raise InvalidInput(f"unknown action {action!r}")

    def said(result) -> str:
        if isinstance(result, ScheduleTick):
            return f"Schedule {name}: tick {result.outcome}" + (
                f", run {result.run_id}." if result.run_id else f" ({result.detail})."
            )
        return f"Schedule {name}: {'paused' if result.paused else 'resumed'}."

    return perform(request, call, back=back, success=said)
