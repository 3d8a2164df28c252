"""Model rows -> the dicts the response schemas describe (``runs.api.schemas``)."""

from typing import Any

from django.db.models import Q

from runs.console.attempts import attempts_by_step
from runs.engine.service import latest_state, open_step, pause_progress, run_etag
from runs.engine.service import shown_usage as budget_usage
from runs.models import Event, Message, Run, Step
from runs.states import RUN_TERMINAL


def etag_header(*statuses: int) -> dict[str, Any]:
    """``openapi_extra`` documenting the ``ETag`` response header on ``statuses`` of an
    operation that sends it (the run's tag, as ``etag`` in the body): what a client
    sends back as ``If-Match`` with its next action."""
    header = {
        "description": "the run's ETag (a run document carries it as etag too): send it "
        "as If-Match with the next action on the run",
        "schema": {"type": "string"},
    }
    # Integer keys, as ninja keys its responses: a string "200" would be a second entry.
    return {"responses": {s: {"headers": {"ETag": header}} for s in statuses}}


def run_summary(run: Run) -> dict[str, Any]:
    return {
        "id": run.pk,
        "etag": run_etag(run),
        "thread_id": run.thread.thread_id,
        "workflow": run.workflow,
        "workflow_version": run.workflow_version,
        "status": run.status,
        "generation": run.generation,
        "goal": run.goal,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "cancel_requested_at": run.cancel_requested_at,
        "error_code": run.error_code or None,
        "last_event_seq": run.event_seq,
        "replay_of": run.replay_of_id,
        "replay_checkpoint": run.replay_checkpoint or None,
        "parent_run": run.parent_run_id,
    }


#: Newest steps a run document carries; ``GET /runs/{id}/steps`` pages through all.
RUN_STEPS_LIMIT = 100


def _attempts(run: Run, step_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """``{step_id: [Attempt.document()]}`` from the step and lease events of
    ``step_ids``, derived as the run page derives them (``runs.console.attempts``)."""
    rows = (
        Event.objects.filter(run=run, step__in=step_ids)
        .filter(Q(type__startswith="step.") | Q(type__startswith="lease."))
        .order_by("seq")
        .only("step_id", "type", "payload", "actor", "created_at")
    )
    return {
        step_id: [attempt.document() for attempt in attempts]
        for step_id, attempts in attempts_by_step(rows).items()
    }


def step_documents(run: Run, steps: list[Step]) -> list[dict[str, Any]]:
    """``steps`` of ``run`` with their attempts (one query for all of them)."""
    attempts = _attempts(run, [s.pk for s in steps])
    return [
        {
            "id": s.pk,
            "name": s.name,
            "seq": s.seq,
            "generation": s.generation,
            "status": s.status,
            "attempt": s.attempt,
            "error_code": s.error_code or None,
            "error_detail": s.error_detail or None,
            "started_at": s.started_at,
            "finished_at": s.finished_at,
            "attempts": attempts.get(s.pk, []),
            "branch_of": s.branch_of_id,
            "position": s.position,
        }
        for s in steps
    ]


def run_document(run: Run) -> dict[str, Any]:
    """The full run: summary, why it failed (``error_detail``), input, next step,
    budget, and its newest ``RUN_STEPS_LIMIT`` steps with their attempts (``steps_total``
    says how many there are; ``GET /runs/{id}/steps`` pages through all of them)."""
    run.refresh_from_db()
    steps = list(Step.objects.filter(run=run).order_by("-seq")[:RUN_STEPS_LIMIT])[::-1]
    total = len(steps)
    if total == RUN_STEPS_LIMIT:
        total = Step.objects.filter(run=run).count()
    nxt = open_step(run)
    current = next((s.name for s in steps if s.pk == run.current_step_id), None)
    if current is None and run.current_step_id:
        current = Step.objects.filter(pk=run.current_step_id).values_list("name", flat=True).first()
    return {
        **run_summary(run),
        "error_detail": run.error_detail or None,
        "input": _object(run.input),
        "effective_input": _object(effective_input(run)),
        "next_step": nxt.name if nxt and run.status not in RUN_TERMINAL else None,
        "current_step": current,
        "budget": {
            "limits": run.budget or {},
            "used": budget_usage(run),
        },
        "steps": step_documents(run, steps),
        "steps_total": total,
        "replays": list(run.replays.order_by("created_at", "pk").values_list("pk", flat=True)),
        **family_document(run),
        "pause_progress": pause_progress(run) or None,
    }


#: Children a run document lists; ``GET /runs?parent={id}`` pages through all.
RUN_CHILDREN_LIMIT = 100


def family_document(run: Run) -> dict[str, Any]:
    """``{"parent": {run, step, position, detached} | None, "children": [{id, workflow,
    status, step, position, detached, error_code}], "children_total": int}``: the run
    that started this one, and the first ``RUN_CHILDREN_LIMIT`` runs it started (by the
    step's seq and position)."""
    parent = None
    if run.parent_run_id is not None:
        parent = {
            "run": run.parent_run_id,
            "step": (
                Step.objects.filter(pk=run.parent_step_id).values_list("name", flat=True).first()
                if run.parent_step_id is not None
                else None
            ),
            "position": run.child_position,
            "detached": run.detached,
        }
    children = Run.objects.filter(parent_run=run)
    rows = list(
        children.order_by("parent_step__seq", "child_position", "pk").values(
            "pk", "workflow", "status", "parent_step__name", "child_position", "detached",
            "error_code",
        )[:RUN_CHILDREN_LIMIT]
    )  # fmt: skip
    total = len(rows) if len(rows) < RUN_CHILDREN_LIMIT else children.count()
    return {
        "parent": parent,
        "children": [
            {
                "id": row["pk"],
                "workflow": row["workflow"],
                "status": row["status"],
                "step": row["parent_step__name"],
                "position": row["child_position"],
                "detached": row["detached"],
                "error_code": row["error_code"] or None,
            }
            for row in rows
        ],
        "children_total": total,
    }


def effective_input(run: Run) -> Any:
    """The input the run's current generation works with: ``run.input`` as started,
    with the ``input_patch`` of each resume applied (kept in the checkpoint state; only
    a resume starts a new generation, so a first-generation run needs no query)."""
    if run.generation <= 1:
        return run.input
    return latest_state(run).get("input", run.input)


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"value": value}


def event_document(event: Event, step_names: dict[int, str]) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "type": event.type,
        "step_id": event.step_id,
        "step": step_names.get(event.step_id) if event.step_id else None,
        "actor": event.actor,
        "created_at": event.created_at,
        "payload": event.payload if isinstance(event.payload, dict) else {"value": event.payload},
    }


def message_document(message: Message) -> dict[str, Any]:
    return {
        "id": message.message_id,
        "seq": message.seq,
        "role": message.role,
        "content": message.content,
        "tool_calls": message.tool_calls or [],
        "tool_call_id": message.tool_call_id or None,
        "status": message.status,
        "run_id": message.run_id,
        "created_at": message.created_at,
    }
