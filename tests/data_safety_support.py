"""Small helpers shared by the data-safety tests (context, thread policy, artifacts,
backup): query a deployment through ``manage.py shell``."""

from __future__ import annotations

import json
from typing import Any

from tests import control_support
from tests.support.services import Deployment


def shell_json(deployment: Deployment, code: str) -> Any:
    """Run ``code`` as ``manage.py shell -c`` runs it, in the deployment's shell probe
    (``Deployment.shell``); it must print one JSON value as its last line, which is
    returned."""
    return json.loads(deployment.shell(code).strip().splitlines()[-1])


def status(deployment: Deployment, run_id: str) -> dict:
    """``runs status RUN --json``, run in the deployment's shell probe."""
    return control_support.status(deployment, run_id)


def step_status(deployment: Deployment, run_id: str, name: str) -> str | None:
    """The status of the run's newest step called ``name`` (or None), read straight from
    the database: waits poll it."""
    return control_support.step_status(deployment, run_id, name)


def context(deployment: Deployment, run_id: str, step: str | None = None) -> dict:
    """``runs context RUN [--step NAME] --json``."""
    args = ["runs", "context", run_id, "--json"]
    if step:
        args += ["--step", step]
    return deployment.manage_json(*args)


def start(deployment: Deployment, workflow: str, thread: str, data: dict, *extra) -> str:
    """``runs start``, run in the deployment's shell probe (``Deployment.call``: the
    command line itself has tests of its own); returns the run id."""
    out = deployment.call(
        "runs", "start", workflow, "--thread", thread, "--input", json.dumps(data), *extra
    )
    return out.strip().splitlines()[-1]
