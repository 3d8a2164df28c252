"""Pause during a fan-out: the request is recorded, idle branches are held, running ones
stop at their next safe point, and the run is PAUSED once none runs, also when the
worker holding them died; resume sends every held branch out again and the join runs
once. A resume from before the fan-out while branches run pauses first, then fans out
again, each effect made once. Real PostgreSQL, Redis and worker subprocesses; the
``branchy`` branches append each effect to a log file (the outside fake) and wait for a
gate file at safe points."""

import signal

from tests.support.deployment_runs import (
    BRANCHY,
    branch_rows,
    facts,
    logged_effects,
    run_ended,
    run_status,
    start_run_in_shell,
)
from tests.support.waiting import wait_until


def _types_after(info: dict, type_: str, first_seq: int) -> list[str]:
    return [e["type"] for e in info["events"] if e["seq"] > first_seq and e["type"] == type_]


def test_a_pause_during_a_fan_out_holds_the_branches_and_resume_joins_once(
    deployment_factory, tmp_path
):
    # A 6-second lease: the heartbeat (every 2 s) brings the request to the branches.
    d = deployment_factory("postgres", {**BRANCHY, "AGENTOPS_LEASE_SECONDS": 6})
    first = d.popen("worker", "--concurrency", 4)
    gate, log = tmp_path / "gate", tmp_path / "effects"
    items = list(range(20))
    run_id = start_run_in_shell(
        d, "branchy", "pause", items=items, hold=items[10:], gate=str(gate), log=str(log)
    )
    # Four slots: the ten quick branches finish, four held ones fill the slots and the
    # other six wait PENDING.
    wait_until(
        lambda: [s for _, s, _ in branch_rows(d, run_id)].count("RUNNING") == 4
        and len(logged_effects(log)) == 10,
        what="ten branches done and four in flight",
        timeout=120,
    )
    said = d.call("runs", "pause", run_id, "--reason", "look at the sources")
    assert "pause requested, waiting for the running steps (4 running)" in said
    wait_until(lambda: run_status(d, run_id) == "PAUSED", what="the pause", timeout=60)

    info = facts(d, run_id)
    branches = branch_rows(d, run_id)
    assert [s for _, s, _ in branches] == ["SUCCEEDED"] * 10 + ["PENDING"] * 10
    paused_at = next(e["seq"] for e in info["events"] if e["type"] == "run.paused")
    requested = [e for e in info["events"] if e["type"] == "run.pause_requested"]
    assert [(e["payload"]["running"], e["seq"] < paused_at) for e in requested] == [(4, True)]
    released = [e for e in info["events"] if e["type"] == "step.released"]
    assert [e["payload"]["reason"] for e in released] == ["pause requested"] * 4
    assert [t["cause"] for t in info["takeovers"]] == ["operator_request"]
    assert sorted(logged_effects(log), key=int) == [str(i) for i in range(10)]

    gate.touch()
    d.call("approvals", "resolve", info["takeovers"][0]["pk"], "resume", "--reason", "sources ok")
    wait_until(lambda: run_ended(d, run_id), what="the resumed run to end", timeout=120)
    done = facts(d, run_id)
    assert done["run"]["status"] == "SUCCEEDED"
    # Nothing ran while the run was paused, then each branch ran to its end once.
    assert not _types_after(info, "step.started", paused_at)
    resumed_at = next(e["seq"] for e in done["events"] if e["type"] == "run.resume_requested")
    assert not [
        e
        for e in done["events"]
        if paused_at < e["seq"] < resumed_at and e["type"] == "step.started"
    ]
    assert [s for _, s, _ in branch_rows(d, run_id)] == ["SUCCEEDED"] * 20
    # The ledger made each outside call once; the join ran once, in input order.
    assert sorted(logged_effects(log), key=int) == [str(i) for i in items]
    assert len(done["operations"]) == 20
    join = next(s for s in done["steps"] if s["name"] == "join")
    assert join["output"]["joined"] == [{"item": i, "double": 2 * i} for i in items]
    assert sum(1 for e in done["events"] if e["type"] == "step.joined") == 1
    assert (
        sum(1 for e in done["events"] if e["step_id"] == join["pk"] and e["type"] == "step.started")
        == 1
    )

    # A resume from before the fan-out while branches run pauses first: the running
    # branches stop, then the new generation fans out again and reuses every effect
    # made, so each item's call happens once.
    log.unlink()
    again = start_run_in_shell(
        d, "branchy", "resume", items=items[:8], hold=items[4:8], gate=str(tmp_path / "g"),
        log=str(log),
    )  # fmt: skip
    wait_until(
        lambda: [s for _, s, _ in branch_rows(d, again)] == ["SUCCEEDED"] * 4 + ["RUNNING"] * 4,
        what="four branches done and four in flight",
        timeout=120,
    )
    said = d.call(
        "runs", "resume", again, "--from", "after:prepare", "--input-patch", '{"hold": []}',
        "--reason", "do not wait for the gate",
    )  # fmt: skip
    assert "resume requested: pause requested, waiting for the running steps (4 running)" in said
    wait_until(lambda: run_ended(d, again), what="the resumed run to end", timeout=120)
    resumed = facts(d, again)
    assert (resumed["run"]["status"], resumed["run"]["generation"]) == ("SUCCEEDED", 2)
    assert sorted(logged_effects(log), key=int) == [str(i) for i in items[:8]]
    join = next(s for s in resumed["steps"] if s["name"] == "join")
    assert join["output"]["joined"] == [{"item": i, "double": 2 * i} for i in items[:8]]
    superseded = [e for e in resumed["events"] if e["type"] == "step.branches_superseded"]
    assert [e["payload"]["count"] for e in superseded] == [8]
    assert not [e for e in resumed["events"] if e["type"] == "run.paused"]

    # A worker that dies holding branches: once another worker is up, liveness gives
    # them back (held) and the pause completes without anyone's help.
    gate2 = tmp_path / "gate2"
    doomed = start_run_in_shell(
        d, "branchy", "dead", items=[1, 2, 3], gate=str(gate2), log=str(log)
    )
    wait_until(
        lambda: [s for _, s, _ in branch_rows(d, doomed)] == ["RUNNING"] * 3,
        what="the worker holding every branch",
        timeout=120,
    )
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    said = d.call("runs", "pause", doomed, "--reason", "worker lost")
    assert "(3 running)" in said
    second = d.popen("worker", "--concurrency", 4)
    wait_until(lambda: run_status(d, doomed) == "PAUSED", what="the pause", timeout=60)
    assert [(s, a) for _, s, a in branch_rows(d, doomed)] == [("PENDING", 1)] * 3
    assert second.poll() is None, d.logs(second)
