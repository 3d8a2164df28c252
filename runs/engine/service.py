"""The engine's one door: the verbs and queries the console, the JSON API, the CLI, the
management commands, the approvals app and the admin call.

Everything here is a re-export of the function, class or constant that does the work
inside the engine (its own docstring gives shapes, units and errors); a few carry a
name that says what they act on where the inner name alone would not (``describe`` of a
schedule is ``describe_schedule`` here). Outside code imports from this module only
(``tests/test_engine_boundaries.py`` refuses anything else); workflow authors import
``agentops.authoring`` instead. Nothing here adds behaviour.

The sections:

- refusals: ``ControlError`` (a ``code``, a ``message`` and field ``errors``) is what
  every verb raises for a request it refuses; ``DecisionConflict`` (an approval decided
  meanwhile), ``BackupError``, ``InvalidJson`` / ``InvalidValue`` (text that is not JSON,
  a value no database stores as sent) and the bounds the faces check before calling;
- run verbs: start, message, cancel, pause, resume, retry, replay, redispatch, decide,
  resolve (a takeover, an unknown outcome), raise budget, signal, deferred tool result;
- status documents and queries: a run's status document, its open step and what it
  waits for, its checkpoints, cancel progress, budget usage, the database clock, run id
  parsing, durations and names;
- schedules, idempotent requests and run preconditions (``If-Match``), as the API and
  the CLI use them;
- processes: the worker, the sweeper's pass, retention, backups, artifact checks.
"""

from runs.engine.control.approvals import DecisionConflict, overdue, with_shown_status
from runs.engine.control.approvals import decide as decide_approval
from runs.engine.control.branches import branch_counts
from runs.engine.control.cancel import cancel_progress, request_cancel
from runs.engine.control.checkpoint_names import (
    checkpoint_labels,
    list_checkpoints,
    resumable_names,
)
from runs.engine.control.deferred_calls import deliver_tool_result
from runs.engine.control.idempotency import (
    await_response,
    check_replay,
    claim_action,
    find_request,
    finish_action,
    release_action,
    start_run_once,
)
from runs.engine.control.idempotency import fingerprint as request_fingerprint
from runs.engine.control.lifecycle import (
    check_thread_id,
    latest_run,
    open_step,
    pause_progress,
    pause_run,
    redispatch,
    retry_step,
    run_status,
    start_run,
    status_extra_lines,
    waiting_on,
)
from runs.engine.control.preconditions import expect as expect_run_etag
from runs.engine.control.preconditions import parse_if_match, run_etag
from runs.engine.control.refusals import (
    MAX_EVIDENCE_CHARS,
    MAX_REASON_CHARS,
    REASONED_ACTIONS,
    require_reason,
)
from runs.engine.control.replay import (
    BULK_LIMIT,
    DEFAULT_RATE,
    ReplayPlan,
    bulk_candidates,
    bulk_replay,
    check_rate,
    plan_replay,
    replay_run,
    replayable_checkpoints,
)
from runs.engine.control.resolutions import RESOLUTIONS, resolve_takeover
from runs.engine.control.rewind import plan_resume, resume_from_checkpoint
from runs.engine.control.run_ids import find_run, id_prefix_q, is_id_prefix
from runs.engine.control.schedules import (
    create_schedule,
    delete_schedule,
    next_fire_times,
    timing_of,
)
from runs.engine.control.schedules import describe as describe_schedule
from runs.engine.control.schedules import set_paused as set_schedule_paused
from runs.engine.control.schedules import trigger_now as trigger_schedule
from runs.engine.control.takeovers import claim_takeover
from runs.engine.control.waits import deliver_signal, waiting_step
from runs.engine.data.artifact_integrity import check_artifacts
from runs.engine.data.artifacts import verify_artifact
from runs.engine.data.backup import BackupError, create_backup, restore_backup
from runs.engine.data.inbox import post_message, set_policy
from runs.engine.data.model_input import assemble_context
from runs.engine.data.retention import prune
from runs.engine.durations import MAX_SECONDS
from runs.engine.effects.budget import (
    COST_PLACES,
    MAX_AMOUNTS,
    amount_from_text,
    raise_budget,
    shown_usage,
)
from runs.engine.effects.rate_limits import configured as configured_rate_limits
from runs.engine.effects.rate_limits import waiting_by_limit
from runs.engine.effects.unknown_outcomes import (
    OUTCOMES,
    contradicts,
    latest_verify_answers,
    resolve_unknown,
    verify_now,
)
from runs.engine.errors import ControlError
from runs.engine.execution.dispatch import mode as dispatch_mode
from runs.engine.execution.failure_log import RepeatedFailureLog
from runs.engine.execution.identity import new_worker_id
from runs.engine.execution.liveness import PG as LIVENESS_PG
from runs.engine.execution.liveness import PID as LIVENESS_PID
from runs.engine.execution.liveness import dead_workers
from runs.engine.execution.progress import CRASH_EXIT_CODE
from runs.engine.execution.slots import MAX_SLOTS
from runs.engine.execution.sweeper import acquire_maintenance_lease, seconds_until_due, sweep_once
from runs.engine.execution.watchdog import silent_by_design, stuck_runs
from runs.engine.execution.worker import Worker
from runs.engine.hooks import FaultFlag, fault_flags
from runs.engine.names import MAX_NAME_CHARS, name_problem
from runs.engine.rules import (
    BIDI_CONTROLS,
    IDENTIFIERS,
    IDS,
    INVALID_INPUT,
    MAX_CHARS,
    MAX_ID,
    MAX_REQUEST_ID_CHARS,
    InputRefused,
    check_identifier,
    check_length,
    check_object,
    field_code,
    identifier_problem,
    is_unsafe,
    number_from_text,
    number_problem,
    parse_id,
    request_id_problem,
    terminal_text,
    text_problem,
    unknown_id_message,
    value_problem,
)
from runs.engine.state.checkpoints import latest_state
from runs.engine.state.clock import db_now
from runs.engine.state.concurrency import waiting_by_workflow
from runs.engine.state.db_faults import BUSY as DB_BUSY
from runs.engine.state.db_faults import LOST as DB_LOST
from runs.engine.state.db_faults import classify as classify_db_fault
from runs.engine.state.values import InvalidJson, InvalidValue, parse_json

__all__ = [
    # Refusals and bounds.
    "BIDI_CONTROLS",
    "BULK_LIMIT",
    "COST_PLACES",
    "ControlError",
    "BackupError",
    "DecisionConflict",
    "InvalidJson",
    "InvalidValue",
    "MAX_AMOUNTS",
    "MAX_EVIDENCE_CHARS",
    "MAX_REASON_CHARS",
    "MAX_SECONDS",
    "MAX_SLOTS",
    "REASONED_ACTIONS",
    "require_reason",
    "check_length",
    "check_thread_id",
    "name_problem",
    "INVALID_INPUT",
    "InputRefused",
    "text_problem",
    "IDENTIFIERS",
    "IDS",
    "MAX_ID",
    "parse_id",
    "unknown_id_message",
    "check_identifier",
    "check_object",
    "field_code",
    "identifier_problem",
    "terminal_text",
    "is_unsafe",
    "parse_json",
    "value_problem",
    # Run verbs.
    "bulk_replay",
    "claim_takeover",
    "decide_approval",
    "deliver_signal",
    "deliver_tool_result",
    "pause_progress",
    "pause_run",
    "plan_replay",
    "plan_resume",
    "post_message",
    "raise_budget",
    "amount_from_text",
    "redispatch",
    "replay_run",
    "request_cancel",
    "resolve_takeover",
    "resolve_unknown",
    "resume_from_checkpoint",
    "retry_step",
    "set_policy",
    "start_run",
    "verify_now",
    # Status documents and queries.
    "DEFAULT_RATE",
    "OUTCOMES",
    "RESOLUTIONS",
    "ReplayPlan",
    "assemble_context",
    "branch_counts",
    "bulk_candidates",
    "cancel_progress",
    "check_rate",
    "checkpoint_labels",
    "configured_rate_limits",
    "contradicts",
    "db_now",
    "find_run",
    "id_prefix_q",
    "is_id_prefix",
    "latest_run",
    "latest_state",
    "latest_verify_answers",
    "list_checkpoints",
    "open_step",
    "overdue",
    "replayable_checkpoints",
    "resumable_names",
    "run_status",
    "shown_usage",
    "silent_by_design",
    "status_extra_lines",
    "stuck_runs",
    "waiting_by_limit",
    "waiting_by_workflow",
    "waiting_on",
    "waiting_step",
    "with_shown_status",
    # Schedules.
    "create_schedule",
    "delete_schedule",
    "describe_schedule",
    "next_fire_times",
    "set_schedule_paused",
    "timing_of",
    "trigger_schedule",
    # Idempotent requests and run preconditions.
    "await_response",
    "check_replay",
    "claim_action",
    "expect_run_etag",
    "find_request",
    "finish_action",
    "parse_if_match",
    "release_action",
    "request_fingerprint",
    "run_etag",
    "start_run_once",
    # Processes: worker, sweeper, retention, backups, artifacts, faults.
    "CRASH_EXIT_CODE",
    "DB_BUSY",
    "DB_LOST",
    "FaultFlag",
    "LIVENESS_PG",
    "LIVENESS_PID",
    "RepeatedFailureLog",
    "Worker",
    "acquire_maintenance_lease",
    "check_artifacts",
    "classify_db_fault",
    "create_backup",
    "dead_workers",
    "dispatch_mode",
    "fault_flags",
    "new_worker_id",
    "prune",
    "restore_backup",
    "seconds_until_due",
    "sweep_once",
    "verify_artifact",
    "MAX_NAME_CHARS",
    "MAX_CHARS",
    "MAX_REQUEST_ID_CHARS",
    "number_from_text",
    "number_problem",
    "request_id_problem",
]
