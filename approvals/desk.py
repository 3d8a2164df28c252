"""What the desk shows of an unknown step besides its stored facts: the latest answer
of the outside world, and which resolutions would go against it (those forms then ask
for an explicit confirmation, as the engine's rule requires)."""

from typing import Any

from runs.engine.service import contradicts, latest_verify_answers
from runs.models import Checkpoint, Takeover
from runs.states import StepStatus


def verify_answers(steps) -> dict[int, dict[str, Any]]:
    """For the UNKNOWN ones of ``steps``, in one query: ``{step_id: {"answer",
    "evidence", "against_done", "against_not_done"}}``, the latest verify answer and
    whether resolving the step as done / not done would go against it; steps with no
    answer that contradicts either way are absent."""
    unknown = [s.pk for s in steps if s is not None and s.status == StepStatus.UNKNOWN]
    shown = {}
    for step_id, answer in latest_verify_answers(unknown).items() if unknown else ():
        against_done = contradicts(answer, done=True)
        against_not_done = contradicts(answer, done=False)
        if against_done or against_not_done:
            shown[step_id] = {
                **answer,
                "against_done": against_done,
                "against_not_done": against_not_done,
            }
    return shown


def attach_verify_answers(takeovers: list[Takeover]) -> None:
    """Give each takeover ``verify`` (its step's entry of ``verify_answers`` or
    ``None``), view-only."""
    answers = verify_answers([t.step for t in takeovers])
    for takeover in takeovers:
        step_id = takeover.step_id
        takeover.verify = answers.get(step_id) if step_id else None  # type: ignore[attr-defined]


def entry_points(takeover: Takeover) -> list[str]:
    """``takeover``'s checkpoint names in run order (``attach_entry_points``)."""
    attach_entry_points([takeover])
    return takeover.entry_points  # type: ignore[attr-defined]


def attach_entry_points(takeovers: list[Takeover]) -> None:
    """Give each takeover ``entry_points``, view-only: the checkpoint names it stored
    when it opened (as a resume names them: a loop's ``after:think#7``), in run order
    (the order the checkpoints were saved) whatever order an older row stored them in.
    One query for the whole page."""
    run_ids = {t.run_id for t in takeovers}
    position: dict[tuple[Any, str], int] = {}
    for index, (run_id, name, seq) in enumerate(
        Checkpoint.objects.filter(run_id__in=run_ids)
        .order_by("pk")
        .values_list("run_id", "name", "step__seq")
    ):
        position.setdefault((run_id, name), index)
        position.setdefault((run_id, f"{name}#{seq}"), index)
    unplaced = len(position)
    for takeover in takeovers:
        run_id = takeover.run_id

        def place(name: str, run_id: Any = run_id) -> int:
            return position.get((run_id, name), unplaced)

        takeover.entry_points = sorted(takeover.checkpoints, key=place)  # type: ignore[attr-defined]
