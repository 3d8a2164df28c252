import pytest

from runs.engine.execution.identity import WorkerIdentity
from runs.workflows import registry

pytest_plugins = ["tests.support.fixtures"]


@pytest.fixture
def worker():
    """A worker identity for in-process executor calls."""
    return WorkerIdentity("test-host:1:aaaaaa", "db")


@pytest.fixture
def other_worker():
    return WorkerIdentity("test-host:2:bbbbbb", "db")


@pytest.fixture
def room_temperature():
    return registry.get("room_temperature")
