"""The PostgreSQL store's claim: one statement.

``claim_step`` does what ``OrmStore.claim`` does (read the step, lock the run, claim,
read the latest checkpoint) for the common case, in a single autocommitted statement
of data-modifying CTEs (one round trip, one transaction): lock the run row, claim the
step with a new attempt (the fencing token), move a PENDING run to RUNNING, make it the
run's current step, append ``run.running`` (when the run was PENDING) and
``step.started`` with gap-free seqs allocated under that lock, and return the run and
the step as they are after the claim together with the run's latest checkpoint chain
(rebuilt to the whole state here, as ``runs.checkpoint_data.materialize`` does).

The statement claims only when the claim needs nothing else first: the run's workflow
version is one this process knows (``known``), the run is not a PENDING one with a
concurrency key (``concurrency.may_start`` decides those), the step is not a PENDING one
with a key (``concurrency.may_run_step``), and the run did not change between the
statement's snapshot and its lock (its ``event_seq``, which every locked write bumps,
is the one the snapshot saw; so the checkpoint read is the latest). When the step is
due but one of those does not hold, the statement writes nothing and the store's
transactional claim decides.

``claim_due`` claims up to k due steps the same way in one statement, for a worker's
free execution slots, as many branches of one run as are due and fit; it reads no
checkpoint (the slot does).
"""

from functools import cache
from typing import Any

from django.db import connection

from runs.checkpoint_data import DELTA, apply
from runs.engine.state.store_interface import CLAIMED, NOT_CLAIMABLE, Claim
from runs.models import Run, Step
from runs.payload_field import resolve
from runs.states import RUN_EXECUTABLE, RunStatus, StepStatus


@cache
def _sql() -> str:
    # Whitespace collapsed: psycopg caches its parse of a statement only up to 4096
    # characters (``tests/test_hot_path.py`` keeps it so); ``*`` keeps it short.
    return " ".join(_SQL.split())


_SQL = """
WITH RECURSIVE st AS (
    SELECT id, run_id, name, generation, status, owner,
        (status = %(pending)s::text AND not_before <= STATEMENT_TIMESTAMP())
        OR (status = %(running)s::text AND lease_until < STATEMENT_TIMESTAMP()) AS due
    FROM runs_step WHERE id = %(step)s::bigint
),
seen AS (
    SELECT runs_run.status, runs_run.generation, runs_run.event_seq
    FROM runs_run JOIN st ON runs_run.id = st.run_id
),
r AS (
    SELECT runs_run.id, runs_run.status, runs_run.event_seq, runs_run.generation
    FROM runs_run
    WHERE runs_run.id = (SELECT run_id FROM st)
        AND runs_run.status = ANY(%(executable)s::text[]) AND runs_run.pause_requested_at IS NULL
        AND runs_run.generation = (SELECT generation FROM st)
        AND runs_run.workflow || '@' || runs_run.workflow_version::text = ANY(%(known)s::text[])
        AND (runs_run.status <> %(run_pending)s::text OR runs_run.concurrency_key = '')
        AND runs_run.event_seq = (SELECT event_seq FROM seen)
    FOR UPDATE
),
s AS (
    UPDATE runs_step SET status = %(running)s::text, attempt = runs_step.attempt + 1,
        owner = %(worker)s::text,
        lease_until = STATEMENT_TIMESTAMP() + make_interval(secs => %(lease)s::float8),
        heartbeat_at = STATEMENT_TIMESTAMP(),
        started_at = COALESCE(runs_step.started_at, STATEMENT_TIMESTAMP()),
        finished_at = NULL
    WHERE runs_step.id = %(step)s::bigint AND EXISTS (SELECT 1 FROM r)
        AND (runs_step.concurrency_key IS NULL OR runs_step.status = %(running)s::text)
        AND ((runs_step.status = %(pending)s::text
                AND runs_step.not_before <= STATEMENT_TIMESTAMP())
            OR (runs_step.status = %(running)s::text
                AND runs_step.lease_until < STATEMENT_TIMESTAMP()))
    RETURNING runs_step.*
),
ru AS (
    UPDATE runs_run SET status = %(run_running)s::text,
        version = runs_run.version + CASE WHEN r.status = %(run_pending)s::text THEN 1 ELSE 0 END,
        started_at = CASE WHEN r.status = %(run_pending)s::text THEN STATEMENT_TIMESTAMP()
            ELSE runs_run.started_at END,
        current_step_id = s.id,
        event_seq = r.event_seq + CASE WHEN r.status = %(run_pending)s::text THEN 2 ELSE 1 END,
        last_event_at = STATEMENT_TIMESTAMP(), updated_at = STATEMENT_TIMESTAMP(),
        stuck_since = NULL
    FROM r, s
    WHERE runs_run.id = r.id
    RETURNING runs_run.*
),
ev AS (
    INSERT INTO runs_event (run_id, step_id, seq, type, payload, actor, created_at)
    SELECT r.id, e.step_id, r.event_seq + e.k, e.type, e.payload, %(worker)s::text,
        STATEMENT_TIMESTAMP()
    FROM r, s, st, LATERAL (
        SELECT 1 AS k, NULL::bigint AS step_id, 'run.running' AS type,
            jsonb_build_object('from', r.status, 'reason', '') AS payload
        WHERE r.status = %(run_pending)s::text
        UNION ALL
        SELECT CASE WHEN r.status = %(run_pending)s::text THEN 2 ELSE 1 END, s.id, 'step.started',
            jsonb_build_object('attempt', s.attempt, 'worker', %(worker)s::text)
            || CASE WHEN st.status = %(running)s::text
                THEN jsonb_build_object('reclaimed_from', st.owner) ELSE '{}'::jsonb END
    ) e
),
cp AS (
    SELECT c.id FROM runs_checkpoint c, r
    WHERE c.run_id = r.id AND c.generation = r.generation AND EXISTS (SELECT 1 FROM s)
    ORDER BY c.id DESC LIMIT 1
),
chain(id, base_id, version, state, depth) AS (
    SELECT c.id, c.base_id, c.version, c.state, 0
    FROM runs_checkpoint c WHERE c.id = (SELECT id FROM cp)
    UNION ALL
    SELECT c.id, c.base_id, c.version, c.state, chain.depth + 1
    FROM runs_checkpoint c JOIN chain ON c.id = chain.base_id
)
SELECT st.due AND seen.status = ANY(%(executable)s::text[]) AND seen.generation = st.generation,
    s.id IS NOT NULL, (SELECT id FROM cp),
    (SELECT jsonb_agg(jsonb_build_array(version, state) ORDER BY depth DESC) FROM chain)::text,
    ru.*, s.*
FROM st LEFT JOIN seen ON TRUE LEFT JOIN s ON TRUE LEFT JOIN ru ON TRUE
"""


#: Columns before the run's in the statement's result.
_LEADING = 4


def _instance(model, columns: list[str], values: tuple):
    """A model instance from raw column values (``columns``: their names, every concrete
    field's column once, in any order), through each field's converters, as the ORM
    reads a row."""
    by_column = dict(zip(columns, values, strict=True))
    converted = []
    for f in model._meta.concrete_fields:
        value = by_column[f.column]
        for converter in f.get_db_converters(connection):
            value = converter(value, f, connection)
        converted.append(value)
    return model.from_db(
        connection.alias, [f.attname for f in model._meta.concrete_fields], converted
    )


def _whole_state(chain_json: str | None) -> dict[str, Any]:
    import json

    state: dict[str, Any] = {}
    for version, data in json.loads(chain_json) if chain_json else []:
        state = dict(data) if version != DELTA else apply(state, data)
    # The rows were read raw: load their payload references (one query, when any).
    return resolve(state)


def claim_step(step_id: int, worker_id: str, ttl: float, *, known: list[str]) -> Claim | None:
    """Claim ``step_id`` for ``worker_id`` with a lease of ``ttl`` seconds in one
    statement (see the module docstring). ``known``: the ``"<workflow>@<version>"``
    keys this process can execute. Returns a ``Claim`` (``CLAIMED`` or
    ``NOT_CLAIMABLE``), or ``None`` when the step is due but the statement declined it
    (the transactional claim decides); database errors propagate."""
    params: dict[str, Any] = {
        "step": step_id,
        "worker": worker_id,
        "lease": float(ttl),
        "known": list(known),
        "executable": [s.value for s in RUN_EXECUTABLE],
        "pending": StepStatus.PENDING.value,
        "running": StepStatus.RUNNING.value,
        "run_pending": RunStatus.PENDING.value,
        "run_running": RunStatus.RUNNING.value,
    }
    # Here, not at the top: it loads psycopg, which a process on SQLite never needs.
    from runs.engine.state import prepared

    row, columns = prepared.fetchone(_sql(), params)
    if row is None:
        return Claim(NOT_CLAIMABLE)
    claimable, claimed, checkpoint_id, chain = row[:_LEADING]
    if not claimed:
        return None if claimable else Claim(NOT_CLAIMABLE)
    step_at = _LEADING + len(Run._meta.concrete_fields)
    run = _instance(Run, columns[_LEADING:step_at], row[_LEADING:step_at])
    step = _instance(Step, columns[step_at:], row[step_at:])
    step.run = run
    return Claim(CLAIMED, run, step, checkpoint_id, _whole_state(chain))


@cache
def _due_sql() -> str:
    return " ".join(_DUE_SQL.split())


_DUE_SQL = """
WITH picked AS (
    SELECT s.id AS step_id, s.run_id, s.status AS was, s.owner AS was_owner,
        s.branch_of_id, r.status AS run_was, r.event_seq AS seq0
    FROM runs_step s JOIN runs_run r ON r.id = s.run_id
    WHERE ((s.status = %(pending)s AND s.not_before <= STATEMENT_TIMESTAMP())
            OR (s.status = %(running)s AND s.lease_until < STATEMENT_TIMESTAMP()))
        AND r.status = ANY(%(executable)s::text[]) AND r.generation = s.generation
        AND r.pause_requested_at IS NULL
        AND r.workflow || '@' || r.workflow_version::text = ANY(%(known)s::text[])
        AND (r.status <> %(run_pending)s OR r.concurrency_key = '')
        AND (s.concurrency_key IS NULL OR s.status = %(running)s)
    ORDER BY s.not_before
    LIMIT %(limit)s
    FOR UPDATE OF s, r SKIP LOCKED
),
ranked AS (
    SELECT picked.*, row_number() OVER (PARTITION BY run_id ORDER BY step_id) AS k,
        bool_and(branch_of_id IS NOT NULL) OVER (PARTITION BY run_id) AS branches
    FROM picked
),
one AS (
    SELECT * FROM ranked WHERE k = 1 OR branches
),
per_run AS (
    SELECT run_id, run_was, seq0, count(*) AS n, max(step_id) AS last_step
    FROM one GROUP BY run_id, run_was, seq0
),
s AS (
    UPDATE runs_step SET status = %(running)s, attempt = runs_step.attempt + 1,
        owner = %(worker)s,
        lease_until = STATEMENT_TIMESTAMP() + make_interval(secs => %(lease)s::float8),
        heartbeat_at = STATEMENT_TIMESTAMP(),
        started_at = COALESCE(runs_step.started_at, STATEMENT_TIMESTAMP()),
        finished_at = NULL
    FROM one WHERE runs_step.id = one.step_id
    RETURNING runs_step.*
),
ru AS (
    UPDATE runs_run SET status = %(run_running)s,
        version = runs_run.version + CASE WHEN p.run_was = %(run_pending)s THEN 1 ELSE 0 END,
        started_at = CASE WHEN p.run_was = %(run_pending)s THEN STATEMENT_TIMESTAMP()
            ELSE runs_run.started_at END,
        current_step_id = p.last_step,
        event_seq = p.seq0 + p.n + CASE WHEN p.run_was = %(run_pending)s THEN 1 ELSE 0 END,
        last_event_at = STATEMENT_TIMESTAMP(), updated_at = STATEMENT_TIMESTAMP(),
        stuck_since = NULL
    FROM per_run p WHERE runs_run.id = p.run_id
    RETURNING runs_run.*
),
ev AS (
    INSERT INTO runs_event (run_id, step_id, seq, type, payload, actor, created_at)
    SELECT e.run_id, e.step_id, e.seq, e.type, e.payload, %(worker)s, STATEMENT_TIMESTAMP()
    FROM (
        SELECT p.run_id, NULL::bigint AS step_id, p.seq0 + 1 AS seq, 'run.running' AS type,
            jsonb_build_object('from', p.run_was, 'reason', '') AS payload
        FROM per_run p WHERE p.run_was = %(run_pending)s
        UNION ALL
        SELECT one.run_id, s.id,
            one.seq0 + one.k + CASE WHEN one.run_was = %(run_pending)s THEN 1 ELSE 0 END,
            'step.started',
            jsonb_build_object('attempt', s.attempt, 'worker', %(worker)s::text)
            || CASE WHEN one.was = %(running)s
                THEN jsonb_build_object('reclaimed_from', one.was_owner) ELSE '{}'::jsonb END
        FROM one JOIN s ON s.id = one.step_id
    ) e
)
SELECT ru.*, s.* FROM ru JOIN s ON s.run_id = ru.id
"""


def claim_due(worker_id: str, ttl: float, limit: int, *, known: list[str]) -> list[Step]:
    """Claim up to ``limit`` due steps for ``worker_id`` with a lease of ``ttl`` seconds
    in one statement: the oldest due steps of runs that may execute, each step and
    its run locked ``FOR UPDATE SKIP LOCKED`` (workers polling at once take different
    steps), at most one per run except the branches of a map step (any number of one
    run's branches, their ``step.started`` events numbered in step order), claimed as
    ``claim_step`` claims one, under the same conditions (a known workflow version, no
    PENDING run or step with a concurrency key; the others are left unclaimed). ``known``: the
    ``"<workflow>@<version>"`` keys this process can execute. Returns the claimed steps
    as they are after the claim, each with its ``run`` (``step.attempt`` is the fencing
    token); database errors propagate."""
    params: dict[str, Any] = {
        "worker": worker_id,
        "lease": float(ttl),
        "limit": int(limit),
        "known": list(known),
        "executable": [s.value for s in RUN_EXECUTABLE],
        "pending": StepStatus.PENDING.value,
        "running": StepStatus.RUNNING.value,
        "run_pending": RunStatus.PENDING.value,
        "run_running": RunStatus.RUNNING.value,
    }
    with connection.cursor() as cursor:
        cursor.execute(_due_sql(), params)
        rows = cursor.fetchall()
        columns = [c.name for c in cursor.description or ()]
    split = len(Run._meta.concrete_fields)
    claimed = []
    for row in rows:
        run = _instance(Run, columns[:split], row[:split])
        step = _instance(Step, columns[split:], row[split:])
        step.run = run
        claimed.append(step)
    return claimed
