"""Network partitions: one worker cut from Redis, then from PostgreSQL, by dropped
packets in a network namespace (``manage.py drill partition``), beside a healthy worker.
Root only; CI runs as root, and ``scripts/install_system_deps.sh`` installs ``ip`` and
``nft`` there."""

import json

import pytest

from lab.drills import partition
from lab.drills.base import run_drill

#: Shorter cuts than the drill's own (75 s and 40 s): every target holds the same,
#: since each is measured from the cut or the heal, not from its length.
CUTS = {"AGENTOPS_PARTITION_REDIS_SECONDS": 20, "AGENTOPS_PARTITION_PG_SECONDS": 20}


@pytest.mark.services
def test_it_passes_the_partition_drill(private_redis, deployment_factory):
    d = deployment_factory("postgres", {"REDIS_URL": private_redis.url(), **CUTS})
    proc = d.manage("drill", "partition", "--json", timeout=280)
    results = json.loads(proc.stdout) if proc.stdout.strip().startswith("[") else None
    assert results is not None, proc.stdout + proc.stderr
    (result,) = results
    assert result["skipped"] is None, result["skipped"]
    assert result["error"] is None, result["error"]
    failed = [c for c in result["checks"] if not c["ok"]]
    assert not failed, json.dumps(failed, indent=2)
    checks = {c["what"]: c["observed"] for c in result["checks"]}
    assert checks["runs created during the cut SUCCEEDED during it (from the database)"] == "3"
    assert checks["cut worker's late write fenced"].startswith("step.commit_rejected attempt 1")
    assert checks["charges applied by the payments ledger"] == "1"
    assert checks["handed over on"] == "['lease.owner_dead']"
    assert proc.returncode == 0


def test_it_skips_the_partition_drill_with_the_reason_when_not_root(monkeypatch):
    monkeypatch.setattr(partition.os, "geteuid", lambda: 1000)
    result = run_drill("partition")
    assert result.skipped == "needs root (network namespaces and packet filter rules)"
    assert result.checks == [] and result.error is None
