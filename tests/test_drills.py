"""The fault drills, each through ``manage.py drill NAME --json`` against real
PostgreSQL + Redis (the drill makes its own scratch database there, and the DB-outage
drill its own PostgreSQL server). Each drill gets a redis-server of its own: the Redis
drill kills every client connection of the server, which would hit parallel tests."""

import json
import shutil
import sys

import pytest

from lab import pg_bootstrap
from lab.drills import catalog, sandbox
from lab.drills.base import DRILLS, DrillResult, Recorder, format_table, run_drill

#: Every drill, in the order ``drill --all`` runs them; ``partition`` runs in
#: tests/test_partitions.py, with shorter cuts than its own.
NAMES = [name for name in DRILLS if name != "partition"]


@pytest.mark.services
@pytest.mark.parametrize("name", NAMES)
def test_it_passes_the_drill(private_redis, deployment_factory, name):
    d = deployment_factory("postgres", {"REDIS_URL": private_redis.url()})
    proc = d.manage("drill", name, "--json", timeout=280)
    results = json.loads(proc.stdout) if proc.stdout.strip().startswith("[") else None
    assert results is not None, proc.stdout + proc.stderr
    (result,) = results
    failed = [c for c in result["checks"] if not c["ok"]]
    assert result["error"] is None, result["error"]
    assert not failed, json.dumps(failed, indent=2)
    assert result["passed"] and proc.returncode == 0, (result["checks"], proc.stderr)
    assert len(result["checks"]) >= 4


def test_it_lists_every_drill():
    assert len(NAMES) >= 13
    assert {
        "kill_after_tool",
        "sigstop_fenced",
        "db_outage",
        "redis_flush",
        "connection_cut",
    } <= set(NAMES)


def test_it_refuses_an_unknown_drill_and_a_database_without_postgres(deployment_factory):
    d = deployment_factory("sqlite")
    unknown = d.manage("drill", "no_such_drill")
    assert unknown.returncode != 0 and "unknown drill" in unknown.stderr
    sqlite = d.manage("drill", "redis_flush")
    assert sqlite.returncode != 0 and "need PostgreSQL" in sqlite.stderr


def test_it_marks_a_drill_failed_when_one_check_disagrees():
    recorder = Recorder()
    recorder.expect("run status", "SUCCEEDED", "SUCCEEDED")
    recorder.expect("thermostat reads", 1, 2)
    result = DrillResult("x", "example", checks=recorder.checks)
    assert not result.passed
    table = format_table([result])
    assert "FAIL" in table and "0 passed, 1 failed" in table


def test_it_names_a_dead_worker_with_its_exit_code_and_log_tail(monkeypatch):
    server = {"host": "127.0.0.1", "port": "1", "user": "", "password": ""}
    monkeypatch.setattr(sandbox, "server_from_settings", lambda: server)
    monkeypatch.setattr(sandbox, "scratch_redis_url", lambda: "redis://127.0.0.1:1/0")
    box = sandbox.Sandbox("deadlog")
    try:
        # A stand-in for a live worker: a process that stays up, then is stopped.
        box.popen([sys.executable, "-c", "import time; time.sleep(120)"], label="worker")
        dead = box.popen(
            [sys.executable, "-c", "print('starting'); print('Redis went away'); exit(3)"],
            label="worker",
        )
        dead.wait(timeout=60)
        recorder = Recorder()
        catalog._expect_workers_alive(recorder, box, 2)
        (check,) = recorder.checks
        assert not check.ok and check.expected == "2"
        assert check.observed == "1; dead: ['worker-2.log exit 3: starting | Redis went away']"
    finally:
        box.kill_workers()
        shutil.rmtree(box.root, ignore_errors=True)


@pytest.mark.services
def test_it_finds_the_server_binaries_on_path_without_the_harness_variables(deployment_factory):
    d = deployment_factory("postgres")
    for name in ("AGENTOPS_PG_BIN", "AGENTOPS_PG_RUN_AS", "AGENTOPS_PG_DATA", "AGENTOPS_PG_LOG"):
        d.env.pop(name, None)
    proc = d.manage("drill", "db_outage", "--json", timeout=280)
    (result,) = json.loads(proc.stdout)
    assert result["skipped"] is None and result["error"] is None, result
    assert result["passed"] and proc.returncode == 0, (result["checks"], proc.stderr)


def test_it_prefers_the_target_of_the_pg_ctl_link_on_path(tmp_path, monkeypatch):
    server_bin = tmp_path / "lib" / "bin"
    server_bin.mkdir(parents=True)
    for tool in pg_bootstrap.PG_SERVER_TOOLS:
        (server_bin / tool).write_text("#!/bin/sh\n")
        (server_bin / tool).chmod(0o755)
    on_path = tmp_path / "local-bin"
    on_path.mkdir()
    (on_path / "pg_ctl").symlink_to(server_bin / "pg_ctl")
    monkeypatch.delenv("AGENTOPS_PG_BIN", raising=False)
    monkeypatch.setenv("PATH", str(on_path))
    assert pg_bootstrap.find_pg_bin() == (server_bin, "")


def test_it_skips_a_drill_with_the_reason_when_postgresql_cannot_run(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTOPS_PG_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(pg_bootstrap.glob, "glob", lambda pattern: [])
    result = run_drill("db_outage")
    assert result.skipped and "not found" in result.skipped
    assert result.passed and result.error is None
    table = format_table([result])
    assert "SKIP" in table and "0 passed, 0 failed, 1 skipped" in table
