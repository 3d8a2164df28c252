"""Pytest fixtures and session rules for black-box deployment tests.

Enable them with ``pytest_plugins = ["tests.support.fixtures"]`` in the top-level
conftest.py. Besides the fixtures, this plugin gives every pytest-xdist worker its own
Redis database and device directories, and turns a skip into a failure where skips are
forbidden (CI, ``make test``): a test that should have run and did not is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.support.services import (
    TEMPLATES,
    Deployment,
    RedisServer,
    Templates,
    isolate_xdist_worker,
    make_deployment,
    skips_forbidden,
)

__all__ = ["deployment_factory", "deployment_templates", "private_redis"]


def pytest_configure(config: pytest.Config) -> None:
    """Per-worker isolation under pytest-xdist (see ``isolate_xdist_worker``)."""
    from django.conf import settings

    isolate_xdist_worker(os.environ.get("PYTEST_XDIST_WORKER"), settings)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Where ``skips_forbidden()``, report a skipped test as failed, with the reason."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and skips_forbidden():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (
            f"skipped ({reason}), but no test may skip in CI or under make test "
            "(AGENTOPS_REQUIRE_SERVICES=1)"
        )


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A started redis-server of this test's own (``RedisServer``), stopped afterwards:
    for tests that flush, restart or reconfigure the whole server. Without redis-server
    it skips (fails where ``skips_forbidden()``)."""
    if not (os.environ.get("AGENTOPS_REDIS_BIN") or shutil.which("redis-server")):
        pytest.skip("redis-server not found: run via make test")
    server = RedisServer(tmp_path / "private-redis").start()
    try:
        yield server
    finally:
        server.stop()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Drop the session's templates once every xdist worker is done (the controller, or
    the only process, does it; see ``Templates.cleanup``)."""
    TEMPLATES.cleanup()


@pytest.fixture(scope="session")
def deployment_templates() -> Iterator[Templates]:
    """The session's migrated templates (shared with the other xdist workers; dropped
    when the whole session ends)."""
    yield TEMPLATES
    TEMPLATES.cleanup()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None, deployment_templates: Templates
) -> None:
    """pytest-django's hook, plus: on PostgreSQL the test database is a copy of the
    session's migrated template (a migrate per xdist worker costs seconds of CPU)."""
    from django.conf import settings

    deployment_templates.use_for_test_database(settings.DATABASES["default"])


@pytest.fixture
def deployment_factory(
    tmp_path: Path, deployment_templates: Templates
) -> Iterator[Callable[..., Deployment]]:
    """Return ``factory(backend="sqlite", extra_env=None) -> Deployment``.

    Each call makes a fresh, migrated deployment under ``tmp_path/dN-<backend>`` (see
    ``make_deployment``); a postgres one skips (fails under CI=true) without
    ``make test``'s services. At teardown every deployment's still-running ``popen``
    processes are SIGKILLed and its PostgreSQL database is dropped.
    """
    created: list[Deployment] = []

    def factory(
        backend: str = "sqlite", extra_env: Mapping[str, object] | None = None
    ) -> Deployment:
        root = tmp_path / f"d{len(created) + 1}-{backend}"
        deployment = make_deployment(root, backend, extra_env=extra_env)
        created.append(deployment)
        return deployment

    yield factory

    errors: list[BaseException] = []
    for deployment in reversed(created):
        try:
            deployment.close()
        except Exception as exc:  # close the others first, then report
            errors.append(exc)
    if errors:
        raise errors[0]
