"""Pytest fixtures for black-box deployment tests.

Enable them in a conftest.py with ``from tests.support.fixtures import *  # noqa: F403``
(or ``pytest_plugins = ["tests.support.fixtures"]`` in the top-level conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.support.services import TEMPLATES, Deployment, Templates, make_deployment

__all__ = ["deployment_factory", "deployment_templates"]


@pytest.fixture(scope="session")
def deployment_templates() -> Iterator[Templates]:
    """The session's migrated templates; dropped/removed when the session ends."""
    yield TEMPLATES
    TEMPLATES.cleanup()


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
