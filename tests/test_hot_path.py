"""The hot path. A worker continues its run by running the next step its commit claimed
for it (on PostgreSQL that commit is one statement). Checkpoints store what changed plus
a reference to the previous one: a long loop grows its checkpoint data linearly, and
every checkpoint still reads back as the whole state."""

import json

import pytest

from agentops.authoring import Workflow, register
from runs.engine.control.lifecycle import start_run
from runs.engine.execution import executor
from runs.engine.state import checkpoints
from runs.engine.state.gateway import run_transaction
from runs.models import Checkpoint, Event, Run, Step
from runs.states import RunStatus, StepStatus
from runs.workflows import registry

pytestmark = pytest.mark.django_db(transaction=True)

looping = Workflow("checkpoint_loop_test", version=1, description="Counts to input.n.")


@looping.step()
def count(ctx):
    seen = ctx.outputs.get("count", {"i": 0})["i"] + 1
    if seen < ctx.input["n"]:
        ctx.goto("count")
    return {"i": seen}


chatty = Workflow("hot_path_messages_test", version=1, description="Talks in two steps.")


@chatty.step()
def ask(ctx):
    call = {"id": "call_1", "name": "lookup", "arguments": {"q": "x"}}
    ctx.add_message("assistant", "let me look", tool_calls=[call])
    ctx.add_message("tool", '{"found": 1}', tool_call_id="call_1")
    return {"asked": True}


@chatty.step()
def answer(ctx):
    ctx.add_message("assistant", "found one")
    return {"answered": True}


keyed = Workflow("hot_path_keyed_test", version=1, description="Two free steps, one keyed.")


@keyed.step()
def first(ctx):
    return {"first": True}


@keyed.step()
def second(ctx):
    return {"second": True}


@keyed.step(concurrency_key="customer", concurrency_limit=2)
def charge(ctx):
    return {"charged": ctx.input["customer"]}


@pytest.fixture
def keyed_workflow():
    register(keyed)
    yield keyed
    registry.unregister("hot_path_keyed_test", 1)


@pytest.fixture
def chatty_workflow():
    register(chatty)
    yield chatty
    registry.unregister("hot_path_messages_test", 1)


@pytest.fixture
def loop_workflow():
    register(looping)
    yield looping
    registry.unregister("checkpoint_loop_test", 1)


def _stored_bytes(run) -> int:
    return sum(
        len(json.dumps(d))
        for d in Checkpoint.objects.filter(run=run).values_list("data", flat=True)
    )


def _run_loop(n: int, worker) -> Run:
    run = start_run("checkpoint_loop_test", thread_id=f"loop-{n}", input={"n": n})
    first = Step.objects.get(run=run)
    assert executor.run_chain(first.pk, worker) == n
    run.refresh_from_db()
    return run


def test_it_grows_checkpoint_storage_linearly_with_the_run(loop_workflow, worker):
    short, long = _run_loop(40, worker), _run_loop(160, worker)
    assert short.status == long.status == RunStatus.SUCCEEDED
    per_step_short = _stored_bytes(short) / 40
    per_step_long = _stored_bytes(long) / 160
    # Whole states would make the per-step size grow with the run (4x here).
    assert per_step_long < per_step_short * 1.5


def test_it_reads_every_checkpoint_back_as_the_whole_state(loop_workflow, worker):
    run = _run_loop(12, worker)
    rows = list(Checkpoint.objects.filter(run=run).order_by("pk"))
    assert rows[0].name == "start" and rows[0].base_id is None
    assert all(cp.base_id == prev.pk for prev, cp in zip(rows, rows[1:], strict=False))
    last = Checkpoint.objects.get(pk=rows[-1].pk)
    assert last.state["completed"] == ["count"] * 12
    assert last.state["outputs"] == {"count": {"i": 12}}
    assert last.state["phase"] is None
    middle = Checkpoint.objects.get(pk=rows[5].pk)
    assert middle.state["completed"] == ["count"] * 5
    assert middle.state["outputs"] == {"count": {"i": 5}}
    assert middle.state["input"] == {"n": 12}
    assert checkpoints.latest_state(run) == last.state


def test_it_continues_the_run_on_the_step_its_commit_claimed(loop_workflow, worker):
    run = _run_loop(5, worker)
    steps = list(
        Step.objects.filter(run=run).order_by("seq").values_list("status", "attempt", "owner")
    )
    assert steps == [(StepStatus.SUCCEEDED, 1, worker.worker_id)] * 5
    types = list(Event.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    # The same event sequence as a claim through the queue: scheduled, then started.
    assert types[:4] == ["run.created", "step.scheduled", "run.running", "step.started"]
    one_step = ["step.succeeded", "checkpoint.saved", "step.scheduled", "step.started"]
    assert types[4:20] == one_step * 4
    assert types[20:] == ["step.succeeded", "checkpoint.saved", "run.succeeded"]
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_it_gives_the_claimed_step_back_when_the_worker_stops(loop_workflow, worker):
    run = start_run("checkpoint_loop_test", thread_id="loop-stop", input={"n": 3})
    first = Step.objects.get(run=run)
    outcome = executor.execute_step(first.pk, worker, chain=True)
    assert outcome.continued is not None
    worker.stopping.set()
    try:
        executor._give_back(outcome.continued, worker)
    finally:
        worker.stopping.clear()
    second = Step.objects.get(pk=outcome.continued.step.pk)
    assert (second.status, second.attempt, second.owner) == (StepStatus.PENDING, 1, "")
    released = Event.objects.get(run=run, type="lease.released")
    assert released.step_id == second.pk
    assert executor.run_chain(second.pk, worker) == 2
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED


def test_it_runs_a_chained_step_in_one_database_round_trip_on_postgresql(loop_workflow, worker):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    if connection.vendor != "postgresql":
        pytest.skip("the one-statement commit is PostgreSQL's; SQLite commits a transaction")
    run = start_run("checkpoint_loop_test", thread_id="loop-trips", input={"n": 4})
    first = Step.objects.get(run=run)
    outcome = executor.execute_step(first.pk, worker, chain=True)
    with CaptureQueriesContext(connection) as queries:
        outcome = executor.continue_step(outcome.continued, worker)
    assert outcome.continued is not None
    assert len(queries) == 1
    types = list(Event.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert (
        types[-8:] == ["step.succeeded", "checkpoint.saved", "step.scheduled", "step.started"] * 2
    )
    state = Checkpoint.objects.filter(run=run).order_by("-pk").first().state
    assert state["completed"] == ["count", "count"]
    assert state["budget_used"] == Run.objects.get(pk=run.pk).usage()


def test_a_step_key_costs_an_unkeyed_chained_step_nothing_and_is_never_born_claimed(
    keyed_workflow, worker
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _postgresql_only()
    run = start_run("hot_path_keyed_test", thread_id="keyed-trips", input={"customer": "A"})
    first_step = Step.objects.get(run=run)
    # The one-statement claim and the one-statement chained commit, as in a workflow
    # without keys.
    with CaptureQueriesContext(connection) as queries:
        outcome = executor.execute_step(first_step.pk, worker, chain=True)
    assert len(queries) == 2 and outcome.continued is not None
    outcome = executor.continue_step(outcome.continued, worker)
    # The keyed step is born PENDING with its key, unclaimed: its claim decides.
    assert outcome.continued is None
    waiting = Step.objects.get(run=run, name="charge")
    assert (waiting.status, waiting.attempt, waiting.owner) == (StepStatus.PENDING, 0, "")
    assert (waiting.concurrency_key, waiting.concurrency_limit) == (
        "hot_path_keyed_test.charge:A",
        2,
    )
    assert Step.objects.filter(run=run, concurrency_key__isnull=True).count() == 2
    executor.execute_step(waiting.pk, worker, chain=True)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert Step.objects.get(pk=waiting.pk).attempt == 1


def test_it_keeps_an_artifact_referenced_during_the_step_in_the_next_checkpoint():
    run = start_run("room_temperature", thread_id="artifact-ref", input={"question": "warm?"})
    base_id, base = checkpoints.latest(run)
    run.refresh_from_db()
    step = Step.objects.get(run=run)
    working = {**base, "artifacts": [*base.get("artifacts", []), 4242]}
    with run_transaction(run.pk) as tx:
        checkpoint_id, _ = tx.save_checkpoint(
            step,
            previous=working,
            previous_id=base_id,
            base_state=base,
            output={"ok": True},
            next_name=None,
            actor="test",
        )
    assert Checkpoint.objects.get(pk=checkpoint_id).base_id == base_id
    assert Checkpoint.objects.get(pk=checkpoint_id).state["artifacts"] == [4242]


def _postgresql_only():
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the one-statement claim and commit are PostgreSQL's")


def test_it_claims_the_first_step_of_a_chain_in_one_round_trip_on_postgresql(loop_workflow, worker):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _postgresql_only()
    run = start_run("checkpoint_loop_test", thread_id="claim-trips", input={"n": 2})
    first = Step.objects.get(run=run)
    with CaptureQueriesContext(connection) as queries:
        outcome = executor.execute_step(first.pk, worker, chain=True)
    assert outcome.continued is not None
    # The claim (read, lock, claim, events, checkpoint) and the chained commit.
    assert len(queries) == 2
    executor.continue_step(outcome.continued, worker)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.started_at is not None and run.version == 2
    steps = Step.objects.filter(run=run).order_by("seq")
    assert [(s.status, s.attempt, s.owner) for s in steps] == [
        (StepStatus.SUCCEEDED, 1, worker.worker_id)
    ] * 2
    events = list(Event.objects.filter(run=run).order_by("seq").values_list("type", "payload"))
    assert [t for t, _ in events] == [
        "run.created",
        "step.scheduled",
        "run.running",
        "step.started",
        "step.succeeded",
        "checkpoint.saved",
        "step.scheduled",
        "step.started",
        "step.succeeded",
        "checkpoint.saved",
        "run.succeeded",
    ]
    assert events[2][1] == {"from": RunStatus.PENDING, "reason": ""}
    assert events[3][1] == {"attempt": 1, "worker": worker.worker_id}
    assert run.event_seq == len(events)
    assert Checkpoint.objects.filter(run=run).order_by("-pk").first().state["outputs"] == {
        "count": {"i": 2}
    }


def test_it_reclaims_an_expired_lease_in_the_one_statement_claim(
    loop_workflow, worker, other_worker
):
    from django.db import connection
    from django.db.models.functions import Now
    from django.test.utils import CaptureQueriesContext

    from runs.engine.state.store import store
    from runs.engine.state.store_interface import CLAIMED, NOT_CLAIMABLE
    from tests.support.states import arrange

    _postgresql_only()
    run = start_run("checkpoint_loop_test", thread_id="claim-reclaim", input={"n": 2})
    first = Step.objects.get(run=run)
    arrange(Run.objects.filter(pk=run.pk), status=RunStatus.RUNNING)
    arrange(
        Step.objects.filter(pk=first.pk),
        status=StepStatus.RUNNING,
        attempt=1,
        owner=other_worker.worker_id,
        lease_until=Now(),
    )
    with CaptureQueriesContext(connection) as queries:
        claim = store().claim(first.pk, worker.worker_id, 30, known=["checkpoint_loop_test@1"])
    assert len(queries) == 1
    assert claim.outcome == CLAIMED
    assert (claim.step.attempt, claim.step.owner) == (2, worker.worker_id)
    assert claim.run.current_step_id == first.pk and claim.run.status == RunStatus.RUNNING
    assert claim.state["phase"] == "count" and claim.state["input"] == {"n": 2}
    started = Event.objects.filter(run=run).order_by("seq").last()
    assert (started.type, started.payload) == (
        "step.started",
        {"attempt": 2, "worker": worker.worker_id, "reclaimed_from": other_worker.worker_id},
    )
    # Held now by a live lease: not claimable, nothing written.
    seq = Run.objects.get(pk=run.pk).event_seq
    again = store().claim(first.pk, other_worker.worker_id, 30, known=["checkpoint_loop_test@1"])
    assert again.outcome == NOT_CLAIMABLE
    assert Run.objects.get(pk=run.pk).event_seq == seq
    assert Step.objects.get(pk=first.pk).attempt == 2


def test_it_leaves_an_unknown_workflow_version_to_the_process_to_prepare(loop_workflow, worker):
    from runs.engine.state.store import store
    from runs.engine.state.store_interface import PREPARE

    _postgresql_only()
    run = start_run("checkpoint_loop_test", thread_id="claim-unknown", input={"n": 1})
    first = Step.objects.get(run=run)
    claim = store().claim(first.pk, worker.worker_id, 30, known=["other@1"])
    assert claim.outcome == PREPARE and claim.step.pk == first.pk
    assert Step.objects.get(pk=first.pk).attempt == 0
    assert Run.objects.get(pk=run.pk).event_seq == 2


def test_it_commits_a_step_that_writes_messages_with_gap_free_seqs(chatty_workflow, worker):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from runs.models import Message, Thread

    run = start_run("hot_path_messages_test", thread_id="chatty", input={"q": "x"})
    before = Thread.objects.get(pk=run.thread_id).message_seq
    first = Step.objects.get(run=run)
    with CaptureQueriesContext(connection) as queries:
        outcome = executor.execute_step(first.pk, worker, chain=True)
    assert outcome.continued is not None
    if connection.vendor == "postgresql":
        # The claim, then the commit with its messages as one statement.
        assert len(queries) == 2
    executor.continue_step(outcome.continued, worker)
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    messages = list(
        Message.objects.filter(run=run)
        .order_by("seq")
        .values_list("seq", "role", "content", "tool_call_id", "status")
    )
    assert messages == [
        (before + 1, "assistant", "let me look", "", "final"),
        (before + 2, "tool", '{"found": 1}', "call_1", "final"),
        (before + 3, "assistant", "found one", "", "final"),
    ]
    assert Message.objects.get(seq=before + 1, thread_id=run.thread_id).tool_calls == [
        {"id": "call_1", "name": "lookup", "arguments": {"q": "x"}}
    ]
    assert Thread.objects.get(pk=run.thread_id).message_seq == before + 3
    events = list(Event.objects.filter(run=run).order_by("seq").values_list("type", "payload"))
    assert [t for t, _ in events][4:] == [
        "step.succeeded",
        "message.created",
        "message.created",
        "checkpoint.saved",
        "step.scheduled",
        "step.started",
        "step.succeeded",
        "message.created",
        "checkpoint.saved",
        "run.succeeded",
    ]
    created = [p for t, p in events if t == "message.created"]
    stored = Message.objects.filter(run=run).order_by("seq")
    assert created == [{"message_id": m.message_id, "role": m.role, "seq": m.seq} for m in stored]
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    states = [c.state for c in Checkpoint.objects.filter(run=run).order_by("pk")]
    assert [st["message_seq"] for st in states[1:]] == [before + 2, before + 3]


def _prepared_statements() -> list[tuple[str, int]]:
    """This session's prepared statements: ``[(text, plans made)]``, by text."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements "
            "ORDER BY statement"
        )
        return cur.fetchall()


def test_it_prepares_the_claim_and_the_commit_once_per_database_session(loop_workflow, worker):
    _postgresql_only()
    run = _run_loop(6, worker)
    assert run.status == RunStatus.SUCCEEDED
    prepared = _prepared_statements()
    claims = [plans for text, plans in prepared if text.startswith("WITH RECURSIVE st AS")]
    commits = [plans for text, plans in prepared if text.startswith("WITH r AS")]
    finishing = [plans for text, plans in prepared if "FOR SHARE" in text]
    assert claims == [1] and len(prepared) == 3
    # Five chained commits on one prepared statement; the last one, which finishes the
    # run (and share-locks the thread row), on another.
    assert sorted(commits) == [1, 5] and finishing == [1]


def test_it_runs_unprepared_when_the_server_forgets_its_prepared_statements(loop_workflow, worker):
    """What a transaction-pooling proxy does: the next statement lands on a server
    session that does not know the prepared one. The commit runs again unprepared (it
    was its own transaction, so the failed try changed nothing)."""
    from django.db import connection

    _postgresql_only()
    run = start_run("checkpoint_loop_test", thread_id="loop-pooled", input={"n": 4})
    outcome = executor.execute_step(Step.objects.get(run=run).pk, worker, chain=True)
    # Behind psycopg's back, as another server session would be.
    connection.connection.pgconn.exec_(b"DEALLOCATE ALL")
    try:
        while outcome.continued is not None:
            outcome = executor.continue_step(outcome.continued, worker)
        # This session prepares nothing more.
        assert _prepared_statements() == []
    finally:
        connection.close()
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    steps = list(Step.objects.filter(run=run).values_list("status", "attempt"))
    assert steps == [(StepStatus.SUCCEEDED, 1)] * 4
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert Event.objects.filter(run=run, type="step.succeeded").count() == 4


def test_psycopg_caches_the_parse_of_each_hot_path_statement():
    from runs.engine.state import one_claim, one_statement

    # psycopg re-parses the placeholders of a longer statement on every execution.
    limit = 4096
    assert len(one_claim._sql()) <= limit
    for thread in (
        one_statement._THREAD_READ,
        one_statement._THREAD_LOCK,
        one_statement._THREAD_ALLOCATE,
    ):
        assert len(one_statement._statement(thread)) <= limit


def test_it_starts_a_message_queued_while_the_last_commit_waited_for_the_thread(
    loop_workflow, worker
):
    """A message posted during the run's last commit: post_message holds the thread row
    while it queues the message (the run still looked in progress), and the commit that
    finishes the run waits for that row, so the run-finished hook sees the message and
    starts its run at once (not a sweep later)."""
    import threading

    from django.db import connection, transaction

    from runs.engine.data import inbox
    from runs.models import Message

    _postgresql_only()
    run = start_run("checkpoint_loop_test", thread_id="race", input={"n": 1})
    first = Step.objects.get(run=run)
    queued, posted, failed = threading.Event(), [], []

    def post_while_the_commit_waits() -> None:
        try:
            with transaction.atomic():
                posted.append(inbox.post_message("race", "next, please", workflow="chat"))
                queued.set()
                waiting = 0
                for _ in range(300):
                    with connection.cursor() as cur:
                        cur.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                            "'Lock' AND datname = current_database()"
                        )
                        waiting = cur.fetchone()[0]
                    if waiting:
                        break
                    threading.Event().wait(0.05)
                if not waiting:
                    failed.append("the commit never waited for the thread row")
        except Exception as exc:  # noqa: BLE001 - reported by the test below
            failed.append(repr(exc))
            queued.set()
        finally:
            connection.close()

    poster = threading.Thread(target=post_while_the_commit_waits)
    poster.start()
    assert queued.wait(30)
    outcome = executor.execute_step(first.pk, worker, chain=True)
    poster.join(30)
    assert not failed, failed
    assert outcome.claimed and outcome.continued is None
    assert posted[0].action == "queued"
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    message = Message.objects.get(message_id=posted[0].message.message_id)
    assert message.status == Message.Status.FINAL and message.seq is not None
    started = Step.objects.filter(run_id=posted[0].run.pk).values_list("name", "status")
    assert list(started) == [(registry.get("chat").first_step, StepStatus.PENDING)]
