"""The PostgreSQL store's commit: one statement.

``commit_step`` does what ``OrmStore.commit`` (``RunTx.finish_attempt``, the messages,
``RunTx.advance``) does for the common case, in a single autocommitted statement of
data-modifying CTEs (one round trip, one transaction): lock the run row, finish the step
behind its attempt fence, save the checkpoint (the delta on its base, with the thread's
message seq and the run's usage filled in by the server), insert the step's messages
with the next thread seqs, insert the next step born claimed by the worker (or finish
the run), bump the run's event seq and insert the events with gap-free seqs allocated
under that lock. The events are the ones the transactional commit writes, in the same
order.

It applies only when every condition holds (the run RUNNING in the step's generation,
no pause requested, the fence matching); otherwise it changes nothing and returns
``None``, and the store's transactional commit runs, which records why
(``step.commit_rejected``) or handles the cancel or pause request.
"""

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import Any

from runs.engine.state.gateway import RUN_FINISHED_HOOKS
from runs.models import Message
from runs.payload_field import INLINE_LIMIT, LITERAL_KEY, REF_KEY
from runs.states import RunStatus, StepStatus

logger = logging.getLogger("agentops.commit")

_SQL = """
WITH r AS (
    SELECT id, event_seq, version, thread_id, model_calls, tool_calls, tokens, cost_usd,
        unpriced_model_calls
    FROM runs_run
    WHERE id = %(run)s::uuid AND status = %(running)s::text AND generation = %(generation)s::integer
        AND pause_requested_at IS NULL
    FOR UPDATE
),
s AS (
    UPDATE runs_step SET status = %(succeeded)s::text, output = %(output)s::jsonb,
        finished_at = STATEMENT_TIMESTAMP(), lease_until = NULL, owner = %(worker)s::text,
        error_code = '', error_detail = ''
    WHERE id = %(step)s::bigint AND attempt = %(attempt)s::integer AND status = %(running)s::text
        AND lease_until > STATEMENT_TIMESTAMP() AND EXISTS (SELECT 1 FROM r)
    RETURNING id
),
t AS (
    {thread}
),
msg AS (
    INSERT INTO runs_message (thread_id, run_id, step_id, seq, message_id, role, content,
        tool_calls, tool_call_id, status, request_id, created_at)
    SELECT r.thread_id, %(run)s::uuid, %(step)s::bigint,
        t.message_seq - %(messages_count)s::integer + m.k,
        m.message_id, m.role, m.content, m.tool_calls, m.tool_call_id, %(final)s::text, '',
        STATEMENT_TIMESTAMP()
    FROM r, s, t, jsonb_to_recordset(%(messages)s::jsonb) AS m(k integer, message_id text,
        role text, content text, tool_calls jsonb, tool_call_id text)
),
nx AS (
    INSERT INTO runs_step (run_id, name, seq, generation, status, attempt, attempt_base,
        owner, lease_until, heartbeat_at, not_before, notified_at, input, output,
        error_code, error_detail, created_at, started_at, finished_at,
        input_artifact_id, output_artifact_id)
    SELECT %(run)s::uuid, %(next_name)s::text, %(next_seq)s::integer,
        %(generation)s::integer, %(running)s::text, 1, 0,
        %(claimed_by)s::text, STATEMENT_TIMESTAMP() + make_interval(secs => %(lease)s::float8),
        STATEMENT_TIMESTAMP(), STATEMENT_TIMESTAMP(), NULL, '{}'::jsonb, NULL, '', '',
        STATEMENT_TIMESTAMP(), STATEMENT_TIMESTAMP(), NULL, NULL, NULL
    FROM s WHERE %(next_name)s::text IS NOT NULL
    RETURNING id
),
cp AS (
    INSERT INTO runs_checkpoint (run_id, step_id, name, generation, version, base_id,
        state, created_at)
    SELECT %(run)s::uuid, %(step)s::bigint, %(checkpoint)s::text, %(generation)s::integer, 2,
        %(base)s::bigint,
        jsonb_set(
            jsonb_set(%(delta)s::jsonb, '{set,message_seq}', to_jsonb(t.message_seq)),
            '{set,budget_used}',
            jsonb_build_object('model_calls', r.model_calls, 'tool_calls', r.tool_calls,
                'tokens', r.tokens, 'cost_usd', r.cost_usd::text,
                'unpriced_model_calls', r.unpriced_model_calls)
        ),
        STATEMENT_TIMESTAMP()
    FROM r, s, t
    RETURNING id
),
ru AS (
    UPDATE runs_run SET event_seq = r.event_seq + %(events_count)s::integer,
        last_event_at = STATEMENT_TIMESTAMP(), updated_at = STATEMENT_TIMESTAMP(),
        stuck_since = NULL,
        current_step_id = CASE WHEN %(finish)s::boolean THEN NULL ELSE (SELECT id FROM nx) END,
        status = CASE WHEN %(finish)s::boolean THEN %(succeeded)s::text ELSE runs_run.status END,
        version = runs_run.version + CASE WHEN %(finish)s::boolean THEN 1 ELSE 0 END,
        finished_at = CASE WHEN %(finish)s::boolean THEN STATEMENT_TIMESTAMP()
            ELSE runs_run.finished_at END
    FROM r, s
    WHERE runs_run.id = r.id
    RETURNING runs_run.event_seq, runs_run.version
),
ev AS (
    INSERT INTO runs_event (run_id, step_id, seq, type, payload, actor, created_at)
    SELECT %(run)s::uuid,
        CASE e.ref WHEN 'next' THEN (SELECT id FROM nx) WHEN 'step' THEN %(step)s::bigint END,
        r.event_seq + e.k, e.type,
        CASE WHEN e.msg IS NULL THEN e.payload
            ELSE e.payload || jsonb_build_object('seq',
                t.message_seq - %(messages_count)s::integer + e.msg)
        END,
        e.actor, STATEMENT_TIMESTAMP()
    FROM r, s, t, jsonb_to_recordset(%(events)s::jsonb)
        AS e(k integer, ref text, type text, payload jsonb, actor text, msg integer)
)
SELECT (SELECT id FROM nx), (SELECT id FROM cp), t.message_seq, r.model_calls,
    r.tool_calls, r.tokens, r.cost_usd, r.unpriced_model_calls, (SELECT event_seq FROM ru),
    (SELECT version FROM ru)
FROM r, s, t
"""

#: The thread's message seq for the checkpoint: read as it is, or, when the step wrote
#: messages, advanced past them (the row stays locked until the statement commits;
#: taken after the run and step rows, the transactional commit's lock order). A commit that
#: finishes the run share-locks the row: a message being queued on the thread (under
#: the thread row lock) is then committed before this commit is, so the run-finished
#: hooks see it (``thread_locked``).
_THREAD_READ = "SELECT message_seq FROM runs_thread WHERE id = (SELECT thread_id FROM r)"
_THREAD_LOCK = _THREAD_READ + " FOR SHARE"
_THREAD_ALLOCATE = (
    "UPDATE runs_thread SET message_seq = message_seq + %(messages_count)s::integer "
    "WHERE id = (SELECT thread_id FROM r) AND EXISTS (SELECT 1 FROM s) RETURNING message_seq"
)


@cache
def _statement(thread: str) -> str:
    """The statement with ``thread`` as its ``t`` part, whitespace collapsed: psycopg
    caches its parse of a statement only up to 4096 characters (``tests/test_hot_path.py``
    keeps it so)."""
    return " ".join(_SQL.replace("{thread}", thread).split())


@dataclass
class CommitRow:
    """What ``commit_step`` wrote: the next step's id (``None`` when the run finished),
    the checkpoint's id, the thread's message seq and the run's usage counters and
    event seq and version after the commit."""

    next_step_id: int | None
    checkpoint_id: int
    message_seq: int
    model_calls: int
    tool_calls: int
    tokens: int
    cost_usd: Decimal
    unpriced_model_calls: int
    event_seq: int
    version: int

    def usage(self) -> dict[str, Any]:
        """The ``budget_used`` shape of a checkpoint state (``Run.usage``)."""
        return {
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "tokens": self.tokens,
            "cost_usd": str(self.cost_usd),
            "unpriced_model_calls": self.unpriced_model_calls,
        }


def inline(value: Any) -> bool:
    """True when ``value`` needs nothing from the payload store (no string over
    ``INLINE_LIMIT`` bytes, no dict using its marker keys), so the statement may write it
    as it is; otherwise the transactional commit externalizes it."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if (
                len(item) > INLINE_LIMIT // 4
                and len(item.encode("utf-8", "surrogatepass")) > INLINE_LIMIT
            ):
                return False
        elif isinstance(item, dict):
            if REF_KEY in item or LITERAL_KEY in item:
                return False
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return True


def commit_step(
    *,
    run_id,
    thread_id: int,
    step_id: int,
    step_name: str,
    generation: int,
    attempt: int,
    worker_id: str,
    claimed_by: str,
    output: Any,
    base_id: int,
    delta: dict[str, Any],
    next_name: str | None,
    next_seq: int | None,
    lease_seconds: float,
    messages: Sequence[dict[str, Any]] = (),
) -> CommitRow | None:
    """Commit attempt ``attempt`` of step ``step_id`` with ``output`` (see the module
    docstring): checkpoint ``after:<step_name>`` stored as ``delta`` on ``base_id``,
    then the next step ``next_name`` at ``next_seq`` born claimed by ``claimed_by`` with
    a lease of ``lease_seconds``, or the run SUCCEEDED when ``next_name`` is ``None``.
    ``messages``: the step's new messages (``{id, role, content, tool_calls,
    tool_call_id}``, values already checked), stored with the next thread seqs.
    Returns ``None`` when the statement did not apply. After a finishing commit the
    run-finished hooks are called (``thread_id`` is the run's thread). Database errors
    propagate."""
    finish = next_name is None
    events: list[dict[str, Any]] = [
        {
            "ref": "step",
            "type": "step.succeeded",
            "payload": {"attempt": attempt, "worker": worker_id},
            "actor": worker_id,
        },
        *(
            {
                "ref": "step",
                "type": "message.created",
                "payload": {"message_id": m["id"], "role": m["role"]},
                "actor": worker_id,
                "msg": i,
            }
            for i, m in enumerate(messages, start=1)
        ),
        {
            "ref": "step",
            "type": "checkpoint.saved",
            "payload": {"name": f"after:{step_name}"},
            "actor": worker_id,
        },
    ]
    if finish:
        events.append(
            {
                "ref": None,
                "type": "run.succeeded",
                "payload": {"from": RunStatus.RUNNING.value, "reason": ""},
                "actor": worker_id,
            }
        )
    else:
        events += [
            {
                "ref": "next",
                "type": "step.scheduled",
                "payload": {"name": next_name, "seq": next_seq},
                "actor": worker_id,
            },
            {
                "ref": "next",
                "type": "step.started",
                "payload": {"attempt": 1, "worker": claimed_by},
                "actor": claimed_by,
            },
        ]
    for k, event in enumerate(events, start=1):
        event["k"] = k
    params: dict[str, Any] = {
        "run": str(run_id),
        "step": step_id,
        "attempt": attempt,
        "generation": generation,
        "worker": worker_id,
        "claimed_by": claimed_by,
        "output": json.dumps(output),
        "running": StepStatus.RUNNING.value,
        "succeeded": StepStatus.SUCCEEDED.value,
        "next_name": next_name,
        "next_seq": next_seq,
        "lease": float(lease_seconds),
        "checkpoint": f"after:{step_name}",
        "base": base_id,
        "delta": json.dumps(delta),
        "events": json.dumps(events),
        "events_count": len(events),
        "finish": finish,
        "final": Message.Status.FINAL.value,
        "messages_count": len(messages),
        "messages": json.dumps(
            [
                {
                    "k": k,
                    "message_id": m["id"],
                    "role": m["role"],
                    "content": m["content"],
                    "tool_calls": m["tool_calls"],
                    "tool_call_id": m["tool_call_id"] or "",
                }
                for k, m in enumerate(messages, start=1)
            ]
        ),
    }
    thread = _THREAD_ALLOCATE if messages else _THREAD_LOCK if finish else _THREAD_READ
    # Here, not at the top: it loads psycopg, which a process on SQLite never needs.
    from runs.engine.state import prepared

    row, _ = prepared.fetchone(_statement(thread), params)
    if row is None:
        return None
    if finish:
        for hook in RUN_FINISHED_HOOKS.values():
            try:
                hook(run_id, thread_id, RunStatus.SUCCEEDED, True)
            except Exception:  # noqa: BLE001 - as transaction.on_commit(robust=True): logged, not raised
                logger.exception("run-finished hook failed for run %s", run_id)
    return CommitRow(*row)
