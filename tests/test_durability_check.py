"""The system check that warns when the database may lose acknowledged commits."""

import pytest

from tests.support.services import BACKENDS


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_is_silent_with_durable_settings(deployment_factory, backend):
    deployment = deployment_factory(backend)
    proc = deployment.manage("check", "--database", "default", check=True)
    assert "agentops.W00" not in proc.stdout + proc.stderr


def test_it_warns_when_postgresql_runs_with_synchronous_commit_off(deployment_factory):
    deployment = deployment_factory(
        "postgres", extra_env={"PGOPTIONS": "-c synchronous_commit=off"}
    )
    proc = deployment.manage("check", "--database", "default", check=True)
    output = proc.stdout + proc.stderr
    assert "agentops.W001" in output and "synchronous_commit=off" in output
    # Without --database the check needs no connection and says nothing.
    assert "agentops.W001" not in deployment.manage("check", check=True).stderr
