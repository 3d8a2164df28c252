"""Fixtures and helpers for the tests that run the product in the test's own process,
on pytest-django's test database: named actors and their logged-in clients, demo runs,
and workers run in this process or as ``manage.py`` subprocesses on the same database.
Import them with ``from tests.support.in_process import *`` (the fixtures need it).

Named actors after healthchecks' habit: ``alice`` the viewer, ``bob`` the operator,
``carol`` the approver, and ``dave``, logged in but in no group, who may do nothing.
"""

import os
import subprocess
from collections.abc import Collection

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Q
from django.test import Client

from lab import demo_seed
from lab.sim import devices
from runs.console.roles import setup_roles
from runs.engine.control import lifecycle
from runs.engine.execution.worker import Worker
from runs.engine.state.clock import db_now
from runs.models import Run, Step
from tests.support.services import REPO_ROOT, manage_argv
from tests.support.waiting import wait_until

PASSWORD = "console-test-pw"
ACTORS = {"alice": "viewer", "bob": "operator", "carol": "approver", "dave": None}

__all__ = [
    "fast_passwords",
    "device_dir",
    "actors",
    "clients",
    "demo",
    "waiting_report",
    "PASSWORD",
    "ACTORS",
    "start_room_temperature",
    "run_worker_in_process",
    "work_until",
    "worker_subprocess_env",
    "run_worker_subprocess",
]


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    """Cheap password hashing: the tests log in often."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def device_dir(settings, tmp_path):
    """A private directory for the simulated outside world (thermostat, lamp, ...)."""
    path = tmp_path / "devices"
    path.mkdir()
    settings.AGENTOPS_DEVICE_DIR = path
    settings.MEDIA_ROOT = tmp_path / "artifacts"
    return path


@pytest.fixture
def actors(db):
    """``{name: user}`` for alice (viewer), bob (operator, staff), carol (approver), dave."""
    groups = setup_roles()
    users = {}
    for name, role in ACTORS.items():
        user = get_user_model().objects.create_user(
            name, password=PASSWORD, is_staff=role == "operator"
        )
        if role:
            user.groups.add(groups[role])
        users[name] = user
    return users


@pytest.fixture
def clients(actors):
    """``{name: logged-in test client}`` (CSRF enforcement has its own test)."""
    result = {}
    for name, user in actors.items():
        client = Client()
        client.force_login(user)
        result[name] = client
    return result


@pytest.fixture
def demo(actors):
    """One demo run per seed scenario (``{scenario: Run}``), from ``seed_demo``'s builder."""
    report = demo_seed.Seeder(len(demo_seed.SCENARIOS), seed=7).seed()
    return {name: Run.objects.get(pk=ids[0]) for name, ids in report.scenarios.items()}


@pytest.fixture
def waiting_report(actors):
    """A real weekly_report run (thread ``R1``) waiting for its publication approval."""
    run = lifecycle.start_run("weekly_report", thread_id="R1", input={"week": "2026-W48"})
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "WAITING_APPROVAL"
    return run


def start_room_temperature(thread: str = "T1", **kwargs) -> Run:
    """A real run of the demo workflow, PENDING with its first step due."""
    return lifecycle.start_run(
        "room_temperature",
        thread_id=thread,
        input={"question": "How warm is the living room?"},
        **kwargs,
    )


def run_worker_in_process() -> int:
    """A real database-polling worker in burst mode, in this process; returns steps run."""
    return Worker(mode="db", burst=True).run()


def work_until(run: Run, statuses: Collection[str], timeout: float = 60) -> Run:
    """Run in-process burst workers until ``run`` is in one of ``statuses`` (retries
    wait out their backoff between bursts); returns the refreshed run. Fails the test
    (``AssertionError``) after ``timeout`` seconds, a bound against hangs."""

    def reached() -> bool:
        run_worker_in_process()
        run.refresh_from_db()
        return run.status in statuses

    wait_until(reached, what=f"run {run.pk} to reach {'/'.join(sorted(statuses))}", timeout=timeout)
    return run


def worker_subprocess_env(settings, **extra) -> dict[str, str]:
    """Environment for a ``manage.py`` subprocess that works on this test's database
    and simulated devices (pytest-django's test database, SQLite file or PostgreSQL)."""
    env = dict(os.environ)
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        env.pop("DATABASE_URL", None)
        env["AGENTOPS_SQLITE_PATH"] = str(db["NAME"])
    else:
        env["DATABASE_URL"] = (
            f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        )
    env["AGENTOPS_DEVICE_DIR"] = str(settings.AGENTOPS_DEVICE_DIR)
    env["AGENTOPS_MEDIA_ROOT"] = str(settings.MEDIA_ROOT)
    env["DJANGO_SETTINGS_MODULE"] = "agentops.settings"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_worker_subprocess(env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    """``manage.py worker --burst --mode db`` in its own process, to completion."""
    return subprocess.run(
        manage_argv("worker", "--burst", "--mode", "db"),
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def failed_runs(n: int, thread: str = "F", request: str = "dim it") -> list[Run]:
    """``n`` dim_lights runs (threads ``<thread>0`` ...) FAILED at their lamp read: the
    simulated lamp refuses the next ``n`` reads (``PERMISSION_DENIED``), and an
    in-process worker works them. Fails the test (``AssertionError``) if one did not
    fail."""
    with devices.lamp.locked() as data:
        data["state"]["fail_next"] = {"get_brightness": ["PERMISSION_DENIED"] * n}
    runs = [
        lifecycle.start_run("dim_lights", thread_id=f"{thread}{i}", input={"request": request})
        for i in range(n)
    ]
    run_worker_in_process()
    for run in runs:
        run.refresh_from_db()
        assert run.status == "FAILED", (run.pk, run.status)
    return runs


def unknown_outcome_run(settings) -> Run:
    """The origin story, for real: a worker process sets the lamp and dies (exit 75)
    before saving; after its lease expires, a second worker finds the intent, the lamp
    cannot be read, and the run pauses with the step UNKNOWN."""
    env = worker_subprocess_env(settings, AGENTOPS_LEASE_SECONDS=1)
    run = lifecycle.start_run(
        "dim_lights",
        thread_id="L",
        input={"request": "lower the brightness by 10%"},
        faults={"crash_after_tool": "set_brightness", "lamp_unreadable": True},
    )
    first = run_worker_subprocess(env)
    assert first.returncode == 75, first.stdout + first.stderr
    step = Step.objects.get(run=run, name="set_brightness")
    wait_until(
        lambda: Step.objects.filter(
            Q(lease_until__isnull=True) | Q(lease_until__lt=db_now()), pk=step.pk
        ).exists(),
        what="the dead worker's lease to expire",
        timeout=60,
    )
    second = run_worker_subprocess(env)
    assert second.returncode == 0, second.stdout + second.stderr
    run.refresh_from_db()
    assert run.status == "PAUSED", second.stdout
    assert Step.objects.get(pk=step.pk).status == "UNKNOWN"
    return run
