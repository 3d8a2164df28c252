"""Named points on the execution path where code outside the engine may act: the lab's
fault injection (``lab.injection``) installs itself here when its app starts, so the
engine's claim, step and commit carry no fault conditions of their own.

Every point does nothing until a hook is registered for it. A hook runs in the worker
process, inline, at the moment the point names; what it raises propagates as if the
engine's own code had raised there (a hook that must stop the process exits it).

Points and what their hooks are called with (``run`` a ``Run``, ``step`` a ``Step``):

- ``STEP_CLAIMED``: ``(run, step, attempt, worker_id)``: the step is claimed by this
  worker with ``attempt`` (its fencing token) and is about to run.
- ``OUTSIDE_CALL``: ``(run, step_id, tool, action)`` before an outside call is sent
  (its intent is recorded); it may return a function of no arguments, which the engine
  calls once the call has returned and before its result is saved.
- ``MODEL_RESPONSE_RECORDED``: ``(run, step)``: a model response is in the ledger.
- ``ARTIFACT_WRITTEN``: ``(run, step)``: an artifact's file is in storage, its row not
  yet committed.
- ``SUMMARY_READY``: ``(run, step)``: a summary is computed, not yet committed.
- ``CHILDREN_STARTED``: ``(run, step)``: a step's child runs are started, its wait not
  yet recorded.

What arms the hooks rides on the run: its ``faults`` (a JSON object) is set at start
from the fault flags registered here (``register_fault``; ``runs start`` offers each as
an option) and read by the hooks only; the engine stores it and never looks inside.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

STEP_CLAIMED = "step_claimed"
OUTSIDE_CALL = "outside_call"
MODEL_RESPONSE_RECORDED = "model_response_recorded"
ARTIFACT_WRITTEN = "artifact_written"
SUMMARY_READY = "summary_ready"
CHILDREN_STARTED = "child_started"

#: The points inside a step (``runs start --crash-at POINT`` names them).
INSIDE_STEP = (ARTIFACT_WRITTEN, SUMMARY_READY, CHILDREN_STARTED)
POINTS = (STEP_CLAIMED, OUTSIDE_CALL, MODEL_RESPONSE_RECORDED, *INSIDE_STEP)

_HOOKS: dict[str, list[Callable[..., Any]]] = {point: [] for point in POINTS}


@dataclass(frozen=True)
class FaultFlag:
    """A one-shot fault a run may carry in its ``faults``, offered by ``runs start`` as
    ``--<name with dashes>``.

    ``name``: its key in the run's ``faults``. ``help``: the option's help text.
    ``metavar``: what its value names (``STEP``, ``TOOL``); ``None`` makes it an option
    without a value that stores ``True``. ``parse``: turns the option's text into the
    value, raising ``argparse.ArgumentTypeError`` or ``ValueError`` for bad text
    (``None``: the text as given). ``choices``: the values allowed (``None``: any).
    ``check``: ``check(workflow, value)`` raises ``ControlError`` when the fault could
    never fire in ``workflow`` (``None``: no check).
    """

    name: str
    help: str
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    check: Callable[[Any, Any], None] | None = None


_FAULT_FLAGS: dict[str, FaultFlag] = {}


def register_fault(flag: FaultFlag) -> None:
    """Offer ``flag`` from now on (after the ones registered before it). Raises
    ``ValueError`` for a name registered twice."""
    if flag.name in _FAULT_FLAGS:
        raise ValueError(f"fault {flag.name!r} registered twice")
    _FAULT_FLAGS[flag.name] = flag


def fault_flags() -> list[FaultFlag]:
    """The registered fault flags, in registration order (none without the lab)."""
    return list(_FAULT_FLAGS.values())


def register(point: str, hook: Callable[..., Any]) -> None:
    """Call ``hook`` at ``point`` (one of ``POINTS``) from now on, after the hooks
    registered before it; registering the same hook twice keeps one. Raises
    ``KeyError`` for an unknown point."""
    hooks = _HOOKS[point]
    if hook not in hooks:
        hooks.append(hook)


def reached(point: str, *args: Any) -> None:
    """The execution path is at ``point``: call its hooks with ``args``."""
    for hook in _HOOKS[point]:
        hook(*args)


def before_outside_call(
    run: Any, step_id: int | None, tool: Any, action: str
) -> Callable[[], None]:
    """Call the ``OUTSIDE_CALL`` hooks; returns the function to call once the outside
    call has returned (it calls what the hooks returned, in order)."""
    afters = [after for hook in _HOOKS[OUTSIDE_CALL] if (after := hook(run, step_id, tool, action))]

    def after_call() -> None:
        for after in afters:
            after()

    return after_call
