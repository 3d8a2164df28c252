"""The store's contract: every move against both backends, the same rows and events.

PostgreSQL runs in this process (the suite's database, autocommit: the one-statement
moves apply); SQLite runs in one deployment's shell probe, which imports this module and
runs every scenario on its own database file. A scenario returns what it observed (JSON)
and each test asserts the same outcome of both.
"""

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import Q
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from runs.engine.control.cancel import request_cancel
from runs.engine.control.lifecycle import start_run
from runs.engine.state import leases
from runs.engine.state.clock import db_now
from runs.engine.state.gateway import run_transaction
from runs.engine.state.store import store
from runs.engine.state.store_interface import (
    ATTEMPT,
    Decision,
    Due,
    NewRun,
    Resolution,
    StepCommit,
)
from runs.engine.state.values import InvalidValue
from runs.models import Approval, Checkpoint, Event, Message, Operation, Run, Step, Takeover
from runs.states import RunStatus, StepStatus
from runs.workflows import registry
from tests.support.services import make_deployment
from tests.support.source_imports import imported_names, project_modules
from tests.support.states import arrange

BACKENDS = {"postgresql": "PostgresStore", "sqlite": "OrmStore"}
QUESTION = {"question": "How warm is the living room?"}
#: Steps one process holds in the heartbeat scenario.
HELD = 12

pytestmark = pytest.mark.django_db(transaction=True)


def _start(thread: str) -> tuple[Run, Step, list[str]]:
    run = start_run("room_temperature", thread_id=thread, input=QUESTION)
    return run, Step.objects.get(run=run), [f"{run.workflow}@{run.workflow_version}"]


def _events(run: Run, after: int = 0) -> list[list[Any]]:
    return [
        [t, p]
        for t, p in Event.objects.filter(run=run, seq__gt=after)
        .order_by("seq")
        .values_list("type", "payload")
    ]


def _seq(run: Run) -> int:
    return Run.objects.get(pk=run.pk).event_seq


def _row(step_id: int) -> list[Any]:
    return list(Step.objects.filter(pk=step_id).values_list("status", "attempt", "owner").get())


def _expire(step_id: int) -> None:
    arrange(Step.objects.filter(pk=step_id), lease_until=Now())


def _trips(fn: Callable[[], Any]) -> tuple[Any, int]:
    with CaptureQueriesContext(connection) as queries:
        result = fn()
    return result, len(queries)


def scenario_claim() -> dict[str, Any]:
    """Claim a due step, refuse a held one, reclaim an expired lease, leave a step that
    needs the process to prepare first unwritten, and claim a step whose run has a fault
    armed (the lab's data, no claim condition)."""
    run, first, known = _start("contract-claim")
    seen = _seq(run)
    claim, trips = _trips(lambda: store().claim(first.pk, "w1", 30, known=known))
    out: dict[str, Any] = {
        "backend": type(store()).__name__,
        "claim": [claim.outcome, claim.step.attempt, claim.step.owner, claim.run.status],
        "claim_trips": trips,
        "state_input": claim.state["input"],
        "checkpoint": claim.checkpoint_id
        == Checkpoint.objects.filter(run=run).order_by("-pk").values_list("pk", flat=True)[0],
        "claim_events": _events(run, seen),
        "run": list(Run.objects.filter(pk=run.pk).values_list("status", "current_step_id").get()),
        "first": first.pk,
    }
    seen = _seq(run)
    held = store().claim(first.pk, "w2", 30, known=known)
    out["held"] = [held.outcome, _seq(run) - seen, _row(first.pk)]
    _expire(first.pk)
    reclaim = store().claim(first.pk, "w2", 30, known=known)
    out["reclaim"] = [reclaim.outcome, _row(first.pk), _events(run, seen)]

    other, step, known = _start("contract-prepare")
    seen = _seq(other)
    unknown = store().claim(step.pk, "w1", 30, known=["other@1"])
    out["prepare"] = [unknown.outcome, unknown.step.pk == step.pk, _seq(other) - seen]
    out["prepare"].append(_row(step.pk))
    Run.objects.filter(pk=other.pk).update(faults={"crash_before": step.name})
    armed = store().claim(step.pk, "w1", 30, known=known)
    out["armed"] = [armed.outcome, _row(step.pk)]
    return out


def scenario_claim_due() -> dict[str, Any]:
    """Claim k due steps when more, fewer and none are due; leave a step that needs the
    process to prepare."""
    # The database holds no other due step (the SQLite probe runs every scenario on one
    # database).
    arrange(Step.objects.filter(leases.due()), status=StepStatus.CANCELLED)
    runs = [_start(f"contract-due-{i}")[0] for i in range(3)]
    # A step of a workflow version this process does not know needs the process to
    # prepare: left unclaimed.
    _, unknown_step, known = _start("contract-due-unknown")
    Run.objects.filter(pk=unknown_step.run_id).update(workflow_version=99)
    seen = [_seq(r) for r in runs]
    batches = [store().claim_due("w1", 30, limit, known=known) for limit in (2, 5, 5)]
    steps = Step.objects.filter(run__in=runs)
    return {
        "sizes": [len(b) for b in batches],
        "claimed": sorted([s.attempt, s.owner, s.status, s.run.status] for b in batches for s in b),
        "distinct": len({s.pk for b in batches for s in b}),
        "rows": sorted(list(r) for r in steps.values_list("status", "attempt", "owner")),
        "events": [_events(r, after) for r, after in zip(runs, seen, strict=True)],
        "unknown": _row(unknown_step.pk),
    }


def scenario_claim_due_branches() -> dict[str, Any]:
    """Claim k due branches of one map step at once."""
    arrange(Step.objects.filter(leases.due()), status=StepStatus.CANCELLED)
    run = start_run("fanout_demo", thread_id="contract-branches", input={"items": 4, "delay_s": 0})
    known = [f"{run.workflow}@{run.workflow_version}"]
    fetch = Step.objects.get(run=run)
    store().claim(fetch.pk, "w1", 30, known=known)
    with run_transaction(run.pk) as tx:
        arrange(Step.objects.filter(pk=fetch.pk), status=StepStatus.WAITING, owner="")
        tx.schedule_branches(fetch, [1, 2, 3, 4], actor="w1")
    seen = _seq(run)
    batch = store().claim_due("w2", 30, 3, known=known)
    return {
        "claimed": sorted([s.position, s.attempt, s.status] for s in batch),
        "events": _events(run, seen),
        "seq": _seq(run) - seen,
        "rows": sorted(
            Step.objects.filter(branch_of=fetch).values_list("position", "status", "owner")
        ),
    }


def scenario_heartbeat() -> dict[str, Any]:
    """One beat for many held steps: renew every held lease, leave a stale attempt's
    step untouched, and tell which renewed step's run has a cancel requested."""
    _, kept, known = _start("contract-beat-kept")
    _, lost, _ = _start("contract-beat-lost")
    asked, cancelled, _ = _start("contract-beat-cancel")
    others = [_start(f"contract-beat-{i}")[1] for i in range(HELD - 3)]
    for step in (kept, lost, cancelled, *others):
        store().claim(step.pk, "w1", 30, known=known)
    _expire(lost.pk)
    store().claim(lost.pk, "w2", 30, known=known)
    request_cancel(Run.objects.get(pk=asked.pk), actor="test", reason="stop this one")
    ids = [kept.pk, lost.pk, cancelled.pk, *(s.pk for s in others)]
    before = dict(Step.objects.filter(pk__in=ids).values_list("pk", "lease_until"))
    beat_lost = Step.objects.get(pk=lost.pk).heartbeat_at
    renewed, trips = _trips(lambda: store().heartbeat([(pk, 1) for pk in ids], 600))
    after = dict(Step.objects.filter(pk__in=ids).values_list("pk", "lease_until"))
    return {
        "renewed": sorted(renewed) == sorted(set(ids) - {lost.pk}),
        "statuses": sorted(renewed.items())
        == sorted(
            [(pk, "RUNNING") for pk in ids if pk not in (lost.pk, cancelled.pk)]
            + [(cancelled.pk, "CANCEL_REQUESTED")]
        ),
        "trips": trips,
        "extended": all(after[pk] > before[pk] for pk in ids if pk != lost.pk),
        "lost_untouched": after[lost.pk] == before[lost.pk]
        and Step.objects.get(pk=lost.pk).heartbeat_at == beat_lost,
        "lost_row": _row(lost.pk),
        "cancelled_row": _row(cancelled.pk),
        "nothing": store().heartbeat([], 600),
    }


def _commit(claim, **fields: Any) -> StepCommit:
    values: dict[str, Any] = {
        "run": claim.run,
        "step": claim.step,
        "attempt": claim.step.attempt,
        "worker_id": "w1",
        "output": {"plan": "read the thermostat"},
        "next_name": "read_temperature",
        "claimed_by": "w1",
        "state": claim.state,
        "checkpoint_id": claim.checkpoint_id,
        "checkpoint_state": claim.state,
    }
    values.update(fields)
    return StepCommit(**values)


def scenario_commit() -> dict[str, Any]:
    """Commit a step with a message and its successor born claimed, then the successor
    finishing the run; and a commit whose successor is born PENDING."""
    run, first, known = _start("contract-commit")
    claim = store().claim(first.pk, "w1", 30, known=known)
    seen = _seq(run)
    message = {"id": "m1", "role": "assistant", "content": "on it", "tool_calls": []}
    message["tool_call_id"] = ""
    done, trips = _trips(lambda: store().commit(_commit(claim, messages=[message])))
    nxt = done.next_step
    out: dict[str, Any] = {
        "backend": type(store()).__name__,
        "applied": done.applied,
        "trips": trips,
        "first": _row(first.pk),
        "next": [
            nxt.status,
            nxt.attempt,
            nxt.owner,
            nxt.name,
            nxt.seq,
            nxt.pk == done.next_step_id,
        ],
        "next_row": _row(done.next_step_id),
        "current": Run.objects.get(pk=run.pk).current_step_id == done.next_step_id,
        "events": _events(run, seen),
        "messages": list(
            Message.objects.filter(step=first).values_list(
                "message_id", "role", "content", "status"
            )
        ),
        "checkpoint": [
            Checkpoint.objects.get(pk=done.checkpoint_id).name,
            Checkpoint.objects.get(pk=done.checkpoint_id).state["outputs"],
            done.state["outputs"],
        ],
    }
    seen = _seq(run)
    last = store().commit(
        StepCommit(
            run=done.run,
            step=nxt,
            attempt=1,
            worker_id="w1",
            output={"celsius": 23.5},
            next_name=None,
            claimed_by="w1",
            state=done.state,
            checkpoint_id=done.checkpoint_id,
            checkpoint_state=done.state,
        )
    )
    out["finish"] = [
        last.applied,
        last.finished,
        last.next_step_id,
        Run.objects.get(pk=run.pk).status,
        _row(nxt.pk),
        [t for t, _ in _events(run, seen)],
    ]

    run, first, known = _start("contract-unclaimed")
    claim = store().claim(first.pk, "w1", 30, known=known)
    seen = _seq(run)
    done = store().commit(_commit(claim, claimed_by=None))
    out["unclaimed"] = [
        done.applied,
        done.next_step is None,
        _row(done.next_step_id),
        [t for t, _ in _events(run, seen)],
    ]
    return out


def scenario_fence() -> dict[str, Any]:
    """A stale attempt's commit, and one whose lease ran out, are refused and write
    nothing but ``step.commit_rejected``."""
    run, first, known = _start("contract-fence")
    stale = store().claim(first.pk, "w1", 30, known=known)
    _expire(first.pk)
    store().claim(first.pk, "w2", 30, known=known)
    checkpoints = Checkpoint.objects.filter(run=run).count()
    seen = _seq(run)
    refused = store().commit(_commit(stale))
    out: dict[str, Any] = {
        "stale": [
            refused.applied,
            _row(first.pk),
            Step.objects.filter(run=run).count(),
            Checkpoint.objects.filter(run=run).count() - checkpoints,
            _events(run, seen),
        ]
    }
    run, first, known = _start("contract-lapsed")
    lapsed = store().claim(first.pk, "w1", 30, known=known)
    _expire(first.pk)
    seen = _seq(run)
    refused = store().commit(_commit(lapsed))
    out["lapsed"] = [refused.applied, _row(first.pk), _events(run, seen)]
    return out


def scenario_create_run() -> dict[str, Any]:
    """Create a run with its first message, checkpoint and step; the same idempotency
    key again returns that run and writes nothing."""
    wf = registry.get("room_temperature")
    new = NewRun(
        workflow=wf.name,
        version=wf.version,
        first_step=wf.first_step,
        thread_id="contract-create",
        input=QUESTION,
        actor="test",
        goal=QUESTION["question"],
        request_id="contract-key",
        request_fingerprint="fp-1",
    )
    run, created = store().create_run(new)
    counts = lambda: [  # noqa: E731
        m.objects.count() for m in (Run, Step, Event, Message, Checkpoint)
    ]
    before = counts()
    again, created_again = store().create_run(new)
    return {
        "created": [created, run.status, run.request_id, run.request_fingerprint, run.goal],
        "events": [[t, {k: v for k, v in p.items() if k != "message_id"}] for t, p in _events(run)],
        "steps": list(Step.objects.filter(run=run).values_list("name", "seq", "status", "attempt")),
        "checkpoints": list(Checkpoint.objects.filter(run=run).values_list("name", flat=True)),
        "messages": list(Message.objects.filter(run=run).values_list("role", "content")),
        "current": run.current_step_id == Step.objects.get(run=run).pk,
        "again": [again.pk == run.pk, created_again, counts() == before],
    }


def _counts() -> list[int]:
    return [
        m.objects.count()
        for m in (Run, Step, Event, Message, Checkpoint, Approval, Takeover, Operation)
    ]


def scenario_schedule() -> dict[str, Any]:
    """Give a claimed attempt back with a retry's backoff; refuse that attempt again;
    wake the PENDING step now; refuse to release an attempt whose lease ran out behind
    the whole fence, then release it uncounted behind its attempt alone."""
    run, first, known = _start("contract-schedule")
    claim = store().claim(first.pk, "w1", 30, known=known)
    later = db_now() + timedelta(seconds=60)
    retry = Due(
        claim.step,
        "w1",
        "step.retry_scheduled",
        {"attempt": 1, "error_code": "E"},
        at=later,
        attempt=1,
        notify=False,
        rejected={"error_code": "E"},
        fields={"error_code": "E"},
    )
    seen = _seq(run)
    with run_transaction(run.pk) as tx:
        applied = store().schedule(tx, retry)
    row = Step.objects.get(pk=first.pk)
    out: dict[str, Any] = {
        "retry": [applied, _row(first.pk), row.not_before == later, row.error_code],
        "retry_events": _events(run, seen),
    }
    seen = _seq(run)
    with run_transaction(run.pk) as tx:
        again = store().schedule(tx, retry)
    out["stale"] = [again, _row(first.pk), _events(run, seen)]
    seen = _seq(run)
    with run_transaction(run.pk) as tx:
        woke = store().schedule(tx, Due(Step.objects.get(pk=first.pk), "op"))
    row = Step.objects.get(pk=first.pk)
    out["woken"] = [woke, row.not_before <= db_now(), row.notified_at is not None, _seq(run) - seen]
    claim = store().claim(first.pk, "w2", 30, known=known)
    _expire(first.pk)
    release = Due(claim.step, "w2", "step.released", {"attempt": 2}, attempt=2, counted=False)
    seen = _seq(run)
    with run_transaction(run.pk) as tx:
        fenced = store().schedule(tx, release)
        release.fence = ATTEMPT
        released = store().schedule(tx, release)
    row = Step.objects.get(pk=first.pk)
    out["release"] = [fenced, released, _row(first.pk), row.attempt_base, _events(run, seen)]
    return out


def _waiting_approval(thread: str, routes: dict[str, Any]) -> tuple[Run, Approval]:
    run, step, _ = _start(thread)
    arrange(Run.objects.filter(pk=run.pk), status=RunStatus.WAITING_APPROVAL)
    arrange(Step.objects.filter(pk=step.pk), status=StepStatus.WAITING)
    return run, Approval.objects.create(run=run, step=step, question="Go?", routes=routes)


def _decide(run: Run, approval: Approval, target: str, **more: Any) -> bool:
    decision = Decision(
        approval.pk,
        approval.step_id,
        target,
        "op",
        output={"decision": target.lower(), "comment": "ok"},
        payload={"approval_id": approval.pk, "comment": "ok"},
        fields={"decided_at": Now(), "comment": "ok"},
        **more,
    )
    with run_transaction(run.pk) as tx:
        return store().decide(tx, decision)


def _decided(run: Run, approval: Approval, seen: int) -> list[Any]:
    return [
        Approval.objects.get(pk=approval.pk).status,
        list(Step.objects.filter(run=run).order_by("seq").values_list("name", "status")),
        list(Run.objects.filter(pk=run.pk).values_list("status", "error_code").get()),
        [[t, p] for t, p in _events(run, seen) if t != "checkpoint.saved"],
        list(Checkpoint.objects.filter(run=run).order_by("pk").values_list("name", flat=True)),
    ]


def scenario_decide() -> dict[str, Any]:
    """Approve: the approval decided, its step SUCCEEDED, the run on the approve route;
    a second decision on it: refused, nothing written; an expiry not yet due: refused;
    a reject without a reject route: the run FAILED."""
    run, approval = _waiting_approval("contract-approve", {"approve": "read_temperature"})
    seen = _seq(run)
    out: dict[str, Any] = {
        "approved_id": approval.pk,
        "approve": [_decide(run, approval, "APPROVED")],
    }
    out["approve"] += _decided(run, approval, seen)
    before = _counts()
    out["again"] = [_decide(run, approval, "REJECTED"), _counts() == before]
    out["again"].append(Approval.objects.get(pk=approval.pk).status)
    run, approval = _waiting_approval("contract-reject", {"approve": "read_temperature"})
    before = _counts()
    early = _decide(run, approval, "EXPIRED", only_if=Q(expires_at__lt=Now()))
    out["early"] = [early, Approval.objects.get(pk=approval.pk).status, _counts() == before]
    seen = _seq(run)
    out["rejected_id"] = approval.pk
    out["reject"] = [_decide(run, approval, "REJECTED")] + _decided(run, approval, seen)
    return out


def scenario_resolve() -> dict[str, Any]:
    """An unknown outcome resolved: the takeover RESOLVED, the ledger row settled and
    the UNKNOWN step made due; a result that cannot be stored and a second, stale
    resolution write nothing."""
    run, step, _ = _start("contract-resolve")
    arrange(Run.objects.filter(pk=run.pk), status=RunStatus.PAUSED)
    arrange(Step.objects.filter(pk=step.pk), status=StepStatus.UNKNOWN, attempt=1)
    op = Operation.objects.create(
        run=run, step=step, idempotency_key="contract-op", tool="thermostat.read"
    )
    takeover = Takeover.objects.create(run=run, step=step, cause="unknown_outcome", reason="?")

    def resolution(result: Any) -> Resolution:
        due = Due(Step.objects.get(pk=step.pk), "op", payload={"reason": "resolved: done"})
        due.fields["attempt_base"] = 1
        return Resolution(
            "op",
            {"action": "mark_done", "reason": "checked", "evidence": "the log"},
            takeover,
            operation=Operation.objects.get(pk=op.pk),
            operation_status=Operation.Status.SUCCEEDED,
            operation_result=result,
            due=due,
        )

    before = _counts()
    try:
        with run_transaction(run.pk) as tx:
            store().resolve(tx, resolution({"celsius": float("nan")}))
        unstorable = "stored"
    except InvalidValue as exc:
        unstorable = exc.code
    out: dict[str, Any] = {
        "unstorable": [unstorable, _counts() == before, _row(step.pk)],
    }
    seen = _seq(run)
    with run_transaction(run.pk) as tx:
        resolved = store().resolve(tx, resolution({"celsius": 23.5}))
    row = Step.objects.get(pk=step.pk)
    out["resolved"] = [
        resolved.pk == takeover.pk,
        list(Takeover.objects.filter(pk=takeover.pk).values_list("status", "resolution").get()),
        list(Operation.objects.filter(pk=op.pk).values_list("status", "result").get()),
        [row.status, row.attempt_base, row.notified_at is not None],
        [[t, {k: v for k, v in p.items() if k != "takeover_id"}] for t, p in _events(run, seen)],
    ]
    before = _counts()
    with run_transaction(run.pk) as tx:
        stale = store().resolve(tx, resolution({"celsius": 0}))
    out["stale"] = [stale, _counts() == before, Operation.objects.get(pk=op.pk).result]
    return out


SCENARIOS = {
    "claim": scenario_claim,
    "claim_due": scenario_claim_due,
    "claim_due_branches": scenario_claim_due_branches,
    "heartbeat": scenario_heartbeat,
    "commit": scenario_commit,
    "fence": scenario_fence,
    "create_run": scenario_create_run,
    "schedule": scenario_schedule,
    "decide": scenario_decide,
    "resolve": scenario_resolve,
}


def observe_all() -> str:
    """Every scenario's observations as JSON (what the SQLite probe prints)."""
    return json.dumps({name: fn() for name, fn in SCENARIOS.items()}, default=str)


@pytest.fixture(scope="module")
def sqlite_observations(tmp_path_factory) -> dict[str, Any]:
    deployment = make_deployment(tmp_path_factory.mktemp("store-sqlite"), "sqlite")
    try:
        out = deployment.shell(
            "from tests.test_store_contract import observe_all\nprint(observe_all())"
        )
    finally:
        deployment.close()
    return json.loads(out)


@pytest.fixture(params=list(BACKENDS))
def observe(request) -> Callable[[str], dict[str, Any]]:
    """``observe(scenario)``: what the scenario observed on this backend."""
    expected = {"expected": BACKENDS[request.param]}
    if request.param == "sqlite":
        observed = request.getfixturevalue("sqlite_observations")
        return lambda name: {**observed[name], **expected}
    return lambda name: {**json.loads(json.dumps(SCENARIOS[name](), default=str)), **expected}


def test_claim(observe):
    out = observe("claim")
    worker_w1 = {"attempt": 1, "worker": "w1"}
    assert out["backend"] == out["expected"]
    assert out["claim"] == ["claimed", 1, "w1", "RUNNING"]
    assert out["state_input"] == QUESTION and out["checkpoint"] is True
    assert out["claim_events"] == [
        ["run.running", {"from": "PENDING", "reason": ""}],
        ["step.started", worker_w1],
    ]
    assert out["run"] == ["RUNNING", out["first"]]
    # Held by w1's live lease: refused, nothing written.
    assert out["held"] == ["not_claimable", 0, ["RUNNING", 1, "w1"]]
    assert out["reclaim"] == [
        "claimed",
        ["RUNNING", 2, "w2"],
        [["step.started", {"attempt": 2, "worker": "w2", "reclaimed_from": "w1"}]],
    ]
    # An unknown workflow version: the process prepares first. An armed crash is the
    # lab's business (its hook fires after the claim): the claim takes the step.
    assert out["prepare"] == ["prepare", True, 0, ["PENDING", 0, ""]]
    assert out["armed"] == ["claimed", ["RUNNING", 1, "w1"]]
    if out["backend"] == "PostgresStore":
        assert out["claim_trips"] == 1


def test_claim_due(observe):
    out = observe("claim_due")
    assert out["sizes"] == [2, 1, 0]
    assert out["distinct"] == 3
    assert out["claimed"] == [[1, "w1", "RUNNING", "RUNNING"]] * 3
    assert out["rows"] == [["RUNNING", 1, "w1"]] * 3
    started = [
        ["run.running", {"from": "PENDING", "reason": ""}],
        ["step.started", {"attempt": 1, "worker": "w1"}],
    ]
    assert out["events"] == [started] * 3
    assert out["unknown"] == ["PENDING", 0, ""]


def test_claim_due_takes_a_map_steps_branches_at_once(observe):
    out = observe("claim_due_branches")
    # Three of the four due branches of one run, in one batch (one statement on
    # PostgreSQL), each with its step.started event in order.
    assert out["claimed"] == [[p, 1, "RUNNING"] for p in range(3)]
    assert out["events"] == [["step.started", {"attempt": 1, "worker": "w2"}]] * 3
    assert out["seq"] == 3
    assert out["rows"] == [[p, "RUNNING", "w2"] for p in range(3)] + [[3, "PENDING", ""]]


def test_heartbeat(observe):
    out = observe("heartbeat")
    assert out["renewed"] and out["extended"] and out["lost_untouched"]
    # Only the cancelled run's step is told to stop; the lost one is not renewed.
    assert out["statuses"] is True
    assert out["lost_row"] == ["RUNNING", 2, "w2"]
    assert out["cancelled_row"] == ["RUNNING", 1, "w1"]
    assert out["nothing"] == {}
    # One statement renews every lease and reads the cancel requests, on both backends.
    assert out["trips"] == 1


def test_commit(observe):
    out = observe("commit")
    assert out["backend"] == out["expected"] and out["applied"] is True
    assert out["first"] == ["SUCCEEDED", 1, "w1"]
    assert out["next"] == ["RUNNING", 1, "w1", "read_temperature", 2, True]
    assert out["next_row"] == ["RUNNING", 1, "w1"] and out["current"] is True
    events = out["events"]
    assert [t for t, _ in events] == [
        "step.succeeded",
        "message.created",
        "checkpoint.saved",
        "step.scheduled",
        "step.started",
    ]
    assert events[0][1] == {"attempt": 1, "worker": "w1"}
    assert events[1][1]["message_id"] == "m1" and events[1][1]["role"] == "assistant"
    assert events[2][1] == {"name": "after:plan"}
    assert events[3][1] == {"name": "read_temperature", "seq": 2}
    assert events[4][1] == {"attempt": 1, "worker": "w1"}
    assert out["messages"] == [["m1", "assistant", "on it", "final"]]
    name, stored, returned = out["checkpoint"]
    assert name == "after:plan" and stored == returned
    assert stored["plan"] == {"plan": "read the thermostat"}
    assert out["finish"] == [
        True,
        True,
        None,
        "SUCCEEDED",
        ["SUCCEEDED", 1, "w1"],
        ["step.succeeded", "checkpoint.saved", "run.succeeded"],
    ]
    assert out["unclaimed"] == [
        True,
        True,
        ["PENDING", 0, ""],
        ["step.succeeded", "checkpoint.saved", "step.scheduled"],
    ]
    if out["backend"] == "PostgresStore":
        # The commit, its message and the successor's schedule: one round trip.
        assert out["trips"] == 1


def test_fenced_commit(observe):
    out = observe("fence")
    applied, row, steps, checkpoints, events = out["stale"]
    assert (applied, row, steps, checkpoints) == (False, ["RUNNING", 2, "w2"], 1, 0)
    assert events == [
        [
            "step.commit_rejected",
            {"attempt": 1, "reason": "stale attempt 1; attempt 2 holds the step", "worker": "w1"},
        ]
    ]
    applied, row, events = out["lapsed"]
    assert (applied, row) == (False, ["RUNNING", 1, "w1"])
    assert events == [
        [
            "step.commit_rejected",
            {"attempt": 1, "reason": "the lease of attempt 1 ran out", "worker": "w1"},
        ]
    ]


def test_create_run(observe):
    out = observe("create_run")
    question = QUESTION["question"]
    assert out["created"] == [True, "PENDING", "contract-key", "fp-1", question]
    assert out["events"] == [
        [
            "run.created",
            {"workflow": "room_temperature", "version": 1, "thread": "contract-create"},
        ],
        ["message.created", {"role": "user", "seq": 1}],
        ["step.scheduled", {"name": "plan", "seq": 1}],
    ]
    assert out["steps"] == [["plan", 1, "PENDING", 0]]
    assert out["checkpoints"] == ["start"] and out["current"] is True
    assert out["messages"] == [["user", question]]
    # The key again: the same run, nothing written.
    assert out["again"] == [True, False, True]


def test_schedule(observe):
    out = observe("schedule")
    # A retry's backoff: the attempt gives the step back, due in a minute.
    assert out["retry"] == [True, ["PENDING", 1, ""], True, "E"]
    assert out["retry_events"] == [["step.retry_scheduled", {"attempt": 1, "error_code": "E"}]]
    # The same attempt again: refused behind its fence, only the refusal written.
    rejected = {"attempt": 1, "reason": "step is PENDING", "error_code": "E", "worker": "w1"}
    assert out["stale"] == [False, ["PENDING", 1, ""], [["step.commit_rejected", rejected]]]
    # A PENDING step woken now: due and notified, no event of its own.
    assert out["woken"] == [True, True, True, 0]
    # A lapsed lease: the whole fence refuses, the attempt's alone gives it back uncounted.
    fenced, released, row, attempt_base, events = out["release"]
    assert (fenced, released, row, attempt_base) == (False, True, ["PENDING", 2, ""], 1)
    lapsed = {"attempt": 2, "reason": "the lease of attempt 2 ran out", "worker": "w2"}
    assert events == [["step.commit_rejected", lapsed], ["step.released", {"attempt": 2}]]


def test_decide(observe):
    out = observe("decide")
    approved, rejected = out["approved_id"], out["rejected_id"]
    decided, status, steps, run, events, checkpoints = out["approve"]
    assert (decided, status, run) == (True, "APPROVED", ["RUNNING", ""])
    assert steps == [["plan", "SUCCEEDED"], ["read_temperature", "PENDING"]]
    assert events == [
        ["approval.approved", {"approval_id": approved, "comment": "ok"}],
        ["step.succeeded", {"approval_id": approved, "decision": "approved", "comment": "ok"}],
        ["run.running", {"from": "WAITING_APPROVAL", "reason": f"approval {approved}: approve"}],
        ["step.scheduled", {"name": "read_temperature", "seq": 2}],
    ]
    assert checkpoints == ["start", "after:plan"]
    # A second decision, and an expiry not yet due: refused, nothing written.
    assert out["again"] == [False, True, "APPROVED"]
    assert out["early"] == [False, "PENDING", True]
    decided, status, steps, run, events, checkpoints = out["reject"]
    assert (decided, status, run) == (True, "REJECTED", ["FAILED", "APPROVAL_REJECTED"])
    assert steps == [["plan", "SUCCEEDED"]] and checkpoints == ["start", "after:plan"]
    assert events == [
        ["approval.rejected", {"approval_id": rejected, "comment": "ok"}],
        ["step.succeeded", {"approval_id": rejected, "decision": "rejected", "comment": "ok"}],
        ["run.failed", {"from": "WAITING_APPROVAL", "reason": f"approval {rejected} reject"}],
    ]


def test_resolve(observe):
    out = observe("resolve")
    # A result that cannot be stored: refused, the takeover and the step as they were.
    assert out["unstorable"] == ["INVALID_OUTPUT", True, ["UNKNOWN", 1, ""]]
    matched, takeover, operation, step, events = out["resolved"]
    assert matched and takeover == ["RESOLVED", "mark_done"]
    assert operation == ["SUCCEEDED", {"celsius": 23.5}]
    assert step == ["PENDING", 1, True]
    note = {"action": "mark_done", "reason": "checked", "evidence": "the log"}
    assert events == [["takeover.resolved", note], ["step.requeued", {"reason": "resolved: done"}]]
    # Resolved again: stale, nothing written.
    assert out["stale"] == [None, True, {"celsius": 23.5}]


def test_only_the_postgresql_store_reaches_its_statements():
    """No caller picks a path: the one-statement claim and commit are reached only
    through the PostgreSQL store, and the execution path imports no backend."""
    modules = project_modules()
    statements = {"runs.engine.state.one_claim", "runs.engine.state.one_statement"}
    backends = {"runs.engine.state.store_orm", "runs.engine.state.store_postgres"}
    importers = {
        name: imported_names(name, path) & (statements | backends) for name, path in modules.items()
    }
    assert {n for n, found in importers.items() if found & statements} == {
        "runs.engine.state.store_postgres"
    }
    assert {n for n, found in importers.items() if found & backends} == {
        "runs.engine.state.store",
        "runs.engine.state.store_postgres",
    }
