"""Replay endpoints: one finished run (``POST /runs/{id}/replay``) or every matching one
(``POST /replays``), both honouring ``Idempotency-Key`` (a retry replays the first
response and creates nothing); the single replay also takes ``If-Match``.

Replaying needs ``runs.operate_run`` (403 ``permission_denied`` otherwise, also for the
run's owner); a bulk replay takes only runs the caller's token can see.
"""

from uuid import UUID

from ninja import Router

from runs.api import access
from runs.api.conditional import conditional_action
from runs.api.documents import etag_header, run_document
from runs.api.errors import ApiError
from runs.api.runs import ERRORS
from runs.api.schemas import BulkReplayIn, BulkReplayOut, ReplayIn, ReplayOut
from runs.engine.service import bulk_candidates, bulk_replay, plan_replay, replay_run

router = Router(tags=["runs"])

OPERATE_PERM = "runs.operate_run"


def _may_replay(user) -> None:
    if not user.has_perm(OPERATE_PERM):
        raise ApiError(403, "permission_denied", "replaying runs needs runs.operate_run")


@router.post(
    "/runs/{run:run_id}/replay",
    response={200: ReplayOut, **ERRORS},
    summary="Replay a finished run as a new run from a checkpoint",
    openapi_extra=etag_header(200),
)
@conditional_action()
def replay(request, run_id: UUID, payload: ReplayIn):
    """Create a new run in the same thread that starts from ``checkpoint`` of this
    finished run (default: the last checkpoint before its failed step); the original is
    not changed. Side effects recorded SUCCEEDED after the checkpoint are reused unless
    ``reexecute``. ``dry_run`` returns the preview only. 409 ``run_not_finished``,
    ``already_replayed`` (pass ``again``); 422 ``unknown_checkpoint``."""
    run = access.get_run(request.user, run_id)
    _may_replay(request.user)
    plan = plan_replay(run, payload.checkpoint, reexecute=payload.reexecute)
    new = None
    if not payload.dry_run:
        new = replay_run(
            run,
            actor=access.actor(request.user),
            reason=payload.reason,
            checkpoint=payload.checkpoint,
            reexecute=payload.reexecute,
            again=payload.again,
        )
    return {
        "dry_run": payload.dry_run,
        "preview": plan.as_dict(),
        "replay": run_document(new) if new is not None else None,
    }


@router.post(
    "/replays",
    response={200: BulkReplayOut, **ERRORS},
    summary="Replay every matching finished run, rate-limited",
)
@conditional_action(lambda kwargs: None, precondition=False)
def replay_bulk(request, payload: BulkReplayIn):
    """Replay each visible run in ``status`` (of ``workflow``, failed with
    ``error_code``, created since ``since``) not replayed already (unless ``again``),
    each from the last checkpoint before its failed step; the k-th replay starts
    ``k / rate`` seconds after the request, so at most ``rate`` start per second. Runs
    that cannot be replayed are listed in ``skipped`` with their code."""
    _may_replay(request.user)
    runs = bulk_candidates(
        status=payload.status,
        workflow=payload.workflow,
        error_code=payload.error_code,
        since=payload.since,
        again=payload.again,
        queryset=access.visible_runs(request.user),
    )
    result = bulk_replay(
        runs,
        actor=access.actor(request.user),
        reason=payload.reason,
        rate=payload.rate,
        reexecute=payload.reexecute,
        again=payload.again,
        dry_run=payload.dry_run,
        limit=payload.limit,
    )
    return result.as_dict()
