"""Map steps: a step fans out into branch rows that run at once on any worker and slot,
and the join gets their results in input order. Real PostgreSQL, Redis and worker
subprocesses; the ``branchy`` branches append to a log file (the outside fake), so the
tests count effects there, and wait for a gate file, so "in flight" is a fact."""

import signal

from tests.support.deployment_runs import (
    BRANCHY,
    branch_rows,
    db_rows,
    facts,
    logged_effects,
    run_ended,
    run_status,
    start_run_in_shell,
)
from tests.support.waiting import wait_until


def _count(events: list[dict], type_: str, step_ids: set[int] | None = None) -> int:
    return sum(
        1 for e in events if e["type"] == type_ and (step_ids is None or e["step_id"] in step_ids)
    )


def test_branches_join_in_input_order_fail_or_join_partially_and_stop_on_cancel(
    deployment_factory, tmp_path
):
    # A 12-second lease: the heartbeat (every 4 s) brings the cancel to the branches
    # soon, and 128 busy slots on a loaded machine still renew every lease in time.
    d = deployment_factory("postgres", {**BRANCHY, "AGENTOPS_LEASE_SECONDS": 12})
    workers = [d.popen("worker", "--concurrency", 64) for _ in range(2)]
    log = tmp_path / "effects"
    items = [7, 3, 9, 1, 5, 8, 2, 6]
    ok = start_run_in_shell(d, "branchy", "ok", items=items, log=str(log))
    wait_until(lambda: run_ended(d, ok), what="the run to end", timeout=120)

    info = facts(d, ok)
    assert info["run"]["status"] == "SUCCEEDED"
    join = [s for s in info["steps"] if s["name"] == "join"]
    assert join[0]["output"]["joined"] == [{"item": i, "double": 2 * i} for i in items]
    assert join[0]["output"]["prepared"] == {"count": len(items)}
    # Every branch ran once, on its first attempt, and made its call once.
    assert branch_rows(d, ok) == [(p, "SUCCEEDED", 1) for p in range(len(items))]
    assert sorted(logged_effects(log), key=int) == [str(i) for i in sorted(items)]
    keys = sorted(op["idempotency_key"].split(":", 2)[2] for op in info["operations"])
    assert keys == sorted(f"work[{p}]:test.touch" for p in range(len(items)))
    work = next(s for s in info["steps"] if s["name"] == "work" and s["seq"] == 2)
    assert work["status"] == "SUCCEEDED"
    assert _count(info["events"], "step.fanned_out") == 1
    assert _count(info["events"], "step.joined") == 1
    assert _count(info["events"], "step.started", {join[0]["pk"]}) == 1
    assert [c["name"] for c in info["checkpoints"]] == [
        "start",
        "after:prepare",
        "after:work",
        "after:join",
    ]

    # A replay from before the fan-out fans out again and reuses every recorded call.
    d.call("runs", "replay", ok, "--from", "after:prepare", "--reason", "again")
    replay = wait_until(
        lambda: db_rows(d, "SELECT id FROM runs_run WHERE replay_of_id = %s", (ok,)),
        what="the replay run",
    )[0][0]
    wait_until(lambda: run_ended(d, str(replay)), what="the replay to end", timeout=120)
    again = facts(d, str(replay))
    assert again["run"]["status"] == "SUCCEEDED"
    join = next(s for s in again["steps"] if s["name"] == "join")
    assert join["output"]["joined"] == [{"item": i, "double": 2 * i} for i in items]
    assert sorted(logged_effects(log), key=int) == [str(i) for i in sorted(items)]

    # A branch failing after its retries fails the run and cancels its open siblings
    # (the others wait for a gate that never opens); partial joins without it.
    log.unlink()
    failing = start_run_in_shell(
        d,
        "branchy",
        "fail",
        items=[1, 2, 3, 4],
        fail=[3],
        gate=str(tmp_path / "never"),
        log=str(log),
    )
    partial = start_run_in_shell(
        d, "branchy_partial", "partial", items=[1, 2, 3, 4], fail=[3], log=str(log)
    )
    wait_until(lambda: run_ended(d, failing), what="the failing run to end", timeout=120)
    wait_until(lambda: run_ended(d, partial), what="the partial run to end", timeout=120)

    failed = facts(d, failing)
    assert failed["run"]["status"] == "FAILED"
    assert branch_rows(d, failing)[2] == (2, "FAILED", 2)
    assert {s for _, s, _ in branch_rows(d, failing)} == {"FAILED", "CANCELLED"}
    assert not [s for s in failed["steps"] if s["name"] == "join"]
    fanned = next(s for s in failed["steps"] if s["name"] == "work" and s["seq"] == 2)
    assert (fanned["status"], fanned["error_code"]) == ("FAILED", "DEPENDENCY_UNAVAILABLE")
    assert run_status(d, failing) == "FAILED"

    joined = facts(d, partial)
    assert joined["run"]["status"] == "SUCCEEDED"
    out = next(s for s in joined["steps"] if s["name"] == "join")["output"]["joined"]
    assert out["results"] == [
        {"item": 1, "double": 2},
        {"item": 2, "double": 4},
        None,
        {"item": 4, "double": 8},
    ]
    assert [(f["position"], f["item"], f["error_code"]) for f in out["failed"]] == [
        (2, 3, "DEPENDENCY_UNAVAILABLE")
    ]

    # A cancel during the fan-out stops the running branches, cancels the rest and
    # undoes each finished branch once (its own compensation, not the map step's).
    gate, log = tmp_path / "gate", tmp_path / "cancel-effects"
    cancelled = start_run_in_shell(
        d, "branchy", "cancel", items=list(range(20)), hold=list(range(10, 20)),
        gate=str(gate), log=str(log),
    )  # fmt: skip
    wait_until(
        lambda: [s for _, s, _ in branch_rows(d, cancelled)][:10] == ["SUCCEEDED"] * 10
        and sum(1 for _, s, _ in branch_rows(d, cancelled) if s == "RUNNING") >= 4,
        what="ten branches done and others in flight",
        timeout=120,
    )
    d.call("runs", "cancel", cancelled, "--reason", "enough")
    wait_until(lambda: run_ended(d, cancelled), what="the cancel to finish", timeout=120)
    assert run_status(d, cancelled) == "CANCELLED"
    assert [s for _, s, _ in branch_rows(d, cancelled)] == ["SUCCEEDED"] * 10 + ["CANCELLED"] * 10
    undone = [str(i) for i in range(10)] + [f"undo{i}" for i in range(10)]
    assert sorted(logged_effects(log)) == sorted(undone)
    statuses = db_rows(
        d,
        "SELECT name, status FROM runs_step WHERE run_id = %s AND branch_of_id IS NULL "
        "ORDER BY seq",
        (cancelled,),
    )
    assert statuses == [("prepare", "SUCCEEDED"), ("work", "CANCELLED")]

    # The demo's shape: 100 branches waiting 1 s each on two workers of 64 slots (its
    # wall time is measured by `bench --only branches`, not here).
    demo = start_run_in_shell(d, "fanout_demo", "demo", items=100, delay_s=1)
    wait_until(lambda: run_ended(d, demo), what="the demo run to end", timeout=180)
    info = facts(d, demo)
    assert info["run"]["status"] == "SUCCEEDED"
    combine = next(s for s in info["steps"] if s["name"] == "combine")
    assert combine["output"] == {"items": 100, "sum": sum(i * i for i in range(1, 101))}
    assert branch_rows(d, demo) == [(p, "SUCCEEDED", 1) for p in range(100)]
    assert len(info["operations"]) == 100
    branch_ids = {s["pk"] for s in info["steps"] if s["name"] == "fetch" and s["seq"] > 1}
    assert _count(info["events"], "step.started", branch_ids) == 100
    for worker in workers:
        assert worker.poll() is None, d.logs(worker)


def test_a_sigkilled_worker_holding_branches_has_each_retaken_and_applied_once(
    deployment_factory, tmp_path
):
    # A 10-minute lease: every branch is retaken through liveness, not the lease.
    d = deployment_factory("postgres", {**BRANCHY, "AGENTOPS_LEASE_SECONDS": 600})
    gate, log = tmp_path / "gate", tmp_path / "effects"
    items = list(range(1, 9))
    doomed = d.popen("worker", "--concurrency", 16)
    run_id = start_run_in_shell(d, "branchy", "kill", items=items, gate=str(gate), log=str(log))
    wait_until(
        lambda: [s for _, s, _ in branch_rows(d, run_id)] == ["RUNNING"] * len(items),
        what="every branch held by the first worker",
        timeout=120,
    )
    rescuer = d.popen("worker", "--concurrency", 16)
    wait_until(
        lambda: db_rows(d, "SELECT count(*) FROM runs_workerprocess WHERE stopped_at IS NULL")[0][0]
        == 2,
        what="the second worker to register",
    )
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=30)
    wait_until(
        lambda: [(s, a) for _, s, a in branch_rows(d, run_id)] == [("RUNNING", 2)] * len(items),
        what="every branch retaken at attempt 2",
        timeout=120,
    )
    gate.touch()
    wait_until(lambda: run_ended(d, run_id), what="the run to end", timeout=120)

    info = facts(d, run_id)
    assert info["run"]["status"] == "SUCCEEDED"
    branch_ids = {s["pk"] for s in info["steps"] if s["name"] == "work" and s["seq"] > 2}
    assert len(branch_ids) == len(items)
    # Each branch committed once and made its outside call once; the join ran once.
    assert _count(info["events"], "step.succeeded", branch_ids) == len(items)
    assert _count(info["events"], "lease.owner_dead", branch_ids) == len(items)
    assert sorted(logged_effects(log), key=int) == [str(i) for i in items]
    join = next(s for s in info["steps"] if s["name"] == "join")
    assert _count(info["events"], "step.started", {join["pk"]}) == 1
    assert _count(info["events"], "step.joined") == 1
    assert join["output"]["joined"] == [{"item": i, "double": 2 * i} for i in items]
    assert rescuer.poll() is None, d.logs(rescuer)


def test_a_resume_from_before_the_fan_out_fans_out_again_reusing_recorded_calls(
    deployment_factory, tmp_path
):
    d = deployment_factory("postgres", BRANCHY)
    worker = d.popen("worker", "--concurrency", 8)
    log = tmp_path / "effects"
    run_id = start_run_in_shell(
        d, "branchy_takeover", "resume", items=[1, 2, 3, 4], fail=[3], log=str(log)
    )
    # Item 3 fails after its retries: the run is paused for a person, its siblings finish
    # and nothing joins while a branch waits for that decision.
    wait_until(
        lambda: run_status(d, run_id) == "PAUSED"
        and [s for _, s, _ in branch_rows(d, run_id)]
        == ["SUCCEEDED", "SUCCEEDED", "FAILED", "SUCCEEDED"],
        what="the run paused with three branches done",
        timeout=120,
    )
    assert sorted(logged_effects(log)) == ["1", "2", "4"]
    d.call(
        "runs", "resume", run_id, "--from", "after:prepare",
        "--input-patch", '{"fail": []}', "--reason", "item 3 is fixed",
    )  # fmt: skip
    wait_until(lambda: run_ended(d, run_id), what="the resumed run to end", timeout=120)

    info = facts(d, run_id)
    assert (info["run"]["status"], info["run"]["generation"]) == ("SUCCEEDED", 2)
    gen1 = [s["status"] for s in info["steps"] if s["name"] == "work" and s["generation"] == 1]
    assert gen1 == ["SUPERSEDED"] * 5
    join = next(s for s in info["steps"] if s["name"] == "join")
    assert join["output"]["joined"] == [{"item": i, "double": 2 * i} for i in [1, 2, 3, 4]]
    # The new generation's branches reused the recorded calls of 1, 2 and 4 by their
    # step and position; only item 3 made its call.
    assert sorted(logged_effects(log)) == ["1", "2", "3", "4"]

    assert worker.poll() is None, d.logs(worker)
