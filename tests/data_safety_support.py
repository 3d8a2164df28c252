"""Small helpers shared by the data-safety tests (context, thread policy, artifacts,
backup): query a deployment through ``manage.py shell`` and wait for a state."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tests import control_support
from tests.support.services import Deployment

#: Upper bound for any wait in these tests (seconds); a bound, never an assertion.
WAIT_LIMIT = 120


def shell_json(deployment: Deployment, code: str) -> Any:
    """Run ``code`` as ``manage.py shell -c`` runs it, in the deployment's shell probe
    (``Deployment.shell``); it must print one JSON value as its last line, which is
    returned."""
    return json.loads(deployment.shell(code).strip().splitlines()[-1])


def wait_for(
    check: Callable[[], Any], what: str, limit: float = WAIT_LIMIT, procs: tuple = ()
) -> Any:
    """Call ``check`` until it returns a truthy value and return that value; fails the
    test after ``limit`` seconds, showing the logs of ``procs`` (``popen`` processes)."""
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            logs = "\n".join(
                f"--- {p.args[2:4]} ---\n" + "\n".join(Deployment.logs(p))[-3000:] for p in procs
            )
            raise AssertionError(f"gave up waiting for {what}\n{logs}")
        time.sleep(0.3)


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
