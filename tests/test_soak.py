"""The bounded chaos soak (CI variant, about two minutes) through ``manage.py soak``."""

import json

import pytest


@pytest.mark.services
def test_it_holds_every_invariant_under_random_faults(private_redis, deployment_factory, tmp_path):
    # A Redis of its own: the soak's faults include dropping every client connection.
    d = deployment_factory("postgres", {"REDIS_URL": private_redis.url()})
    out = tmp_path / "soak.json"
    proc = d.manage(
        "soak",
        "--runs",
        "16",
        "--workers",
        "3",
        "--duration",
        "45",
        "--kill-every",
        "3",
        "--seed",
        "20261129",
        "--json",
        out,
        timeout=280,
    )
    assert "seed: 20261129" in proc.stdout, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    broken = [i for i in report["invariants"] if not i["held"]]
    assert not broken, json.dumps(broken, indent=2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["runs"] == 16 and len(report["invariants"]) == 7
    assert "a RUNNING run has a due or running step" in [i["name"] for i in report["invariants"]]
    assert sum(report["faults"].values()) >= 10
    assert "all invariants held" in proc.stdout
