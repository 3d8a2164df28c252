import logging
import sys
import threading

import pytest
from django.conf import settings

from runs.engine.effects.calls import THREAD_NAME as OUTSIDE_CALL_THREAD
from runs.engine.execution.identity import WorkerIdentity
from runs.workflows import registry

# Workers started inside a test process run one step at a time: one with slots would
# switch the whole process's database to a pool (tests that want slots pass them).
settings.AGENTOPS_WORKER_CONCURRENCY = 1

pytest_plugins = [
    "tests.support.fixtures",
    "tests.support.metrics",
    "tests.support.command_line",
    "tests.support.storage_loop",
]

#: Seconds a test's teardown waits for an outside call it abandoned (a bound, not a timing
#: assertion: the fake outside systems of the tests finish within seconds).
ABANDONED_CALL_WAIT = 120


#: A test's weight in the run order, by the fixtures it uses: the ones that run real
#: processes (servers, workers, manage.py commands) take far longer than the rest.
HEAVY_FIXTURES = {"private_redis": 3, "clone": 3, "deployment_factory": 2}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the modules that start the most processes first: a stable sort by the summed
    ``HEAVY_FIXTURES`` weight of each module's tests, after pytest-django's ordering
    (which stays the order among modules of equal weight). pytest-xdist hands tests out
    in this order, so the long ones start while every worker is busy and the short
    in-process ones fill the end, instead of a long test starting last while the other
    workers sit idle."""

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    weight: dict[str, int] = {}
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        weight[module(item)] = weight.get(module(item), 0) + sum(
            HEAVY_FIXTURES.get(name, 0) for name in fixtures
        )
    items.sort(key=lambda item: -weight[module(item)])


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Wait for the outside calls this test's in-process executor abandoned at their
    timeout, before any fixture (the database above all) is torn down: such a call runs
    on in a daemon thread and records its late result when it returns, which must land
    in its own test's database, not in the next test's. Raises ``RuntimeError`` (a
    teardown error of this test) if one is still running after ``ABANDONED_CALL_WAIT``
    seconds."""
    for thread in threading.enumerate():
        if thread.name == OUTSIDE_CALL_THREAD:
            thread.join(ABANDONED_CALL_WAIT)
            if thread.is_alive():
                raise RuntimeError(
                    f"an abandoned outside call outlived {item.nodeid} by "
                    f"{ABANDONED_CALL_WAIT}s: release the fake outside system in the test"
                )


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


@pytest.fixture(autouse=True, scope="session")
def _log_to_the_process_stderr():
    """The settings' console handler writes to ``sys.__stderr__``. It was made with the
    ``sys.stderr`` of the moment Django was set up, which under pytest is a capture that
    is closed after its test; a record logged later then failed in the handler
    ("I/O operation on closed file") instead of being written. pytest's descriptor
    capture still collects what goes to the process's stderr."""
    for handler in logging.getLogger().handlers:
        if handler.name == "console" and isinstance(handler, logging.StreamHandler):
            handler.stream = sys.__stderr__
