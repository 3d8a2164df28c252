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


@pytest.fixture(autouse=True, scope="session")
def _faulty_workflow():
    """The ``faulty`` test workflow (tests/workflows/faulty.py) in every test process."""
    import tests.workflows.faulty  # noqa: F401 - registers it
