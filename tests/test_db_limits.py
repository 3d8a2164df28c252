"""Bounded lock waits on PostgreSQL: a request that gives up answers 503 with a code and
changes nothing."""

import json

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError, connection, connections, transaction
from django.test import Client

from agentops.db_session import limits, process_kind, use_process_kind
from apitokens.services import create_token
from runs.engine.control.lifecycle import start_run
from runs.engine.control.preconditions import run_etag
from runs.engine.state import db_faults
from runs.models import Event, Run
from runs.states import RunStatus

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (make test)")


@pytest.fixture
def as_web(settings):
    settings.AGENTOPS_DB_TIMEOUTS = {**settings.AGENTOPS_DB_TIMEOUTS, "web": (0.3, 5)}
    before = process_kind()
    use_process_kind("web")
    yield
    use_process_kind(before)


@pytest.fixture
def row_lock():
    """``lock(run)`` holds the run's row lock from another session until teardown."""
    other = connections.create_connection("default")

    def lock(run):
        other.connect()
        other.set_autocommit(False)
        with other.cursor() as cursor:
            cursor.execute("SELECT id FROM runs_run WHERE id = %s FOR UPDATE", [run.pk])

    yield lock
    if other.connection is not None:
        other.rollback()
        other.close()


def test_it_sets_the_kinds_limits_on_the_connection(postgres, as_web):
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        lock = cursor.fetchone()[0]
        cursor.execute("SHOW statement_timeout")
        statement = cursor.fetchone()[0]
    assert (lock, statement) == ("300ms", "5s")
    assert limits("cli")[1] == 0  # command-line tools (migrate, backup) are unbounded


def test_it_answers_503_when_a_cancel_waits_past_the_lock_timeout(postgres, as_web, row_lock):
    alice = User.objects.create_user("alice")
    run = start_run("room_temperature", thread_id="t", input={"question": "q"}, owner=alice)
    events_before = Event.objects.filter(run=run).count()
    _, raw = create_token(alice)
    row_lock(run)

    response = Client(HTTP_AUTHORIZATION=f"Bearer {raw}").post(
        f"/api/v1/runs/{run.pk}/cancel",
        json.dumps({"reason": "stop"}),
        content_type="application/json",
        HTTP_IF_MATCH=run_etag(run),
    )

    assert response.status_code == 503
    assert response.json()["code"] == "database_busy"
    assert response["Retry-After"]
    run.refresh_from_db()
    assert run.status == RunStatus.PENDING
    assert Event.objects.filter(run=run).count() == events_before


def test_it_classifies_a_lock_timeout_as_busy(postgres, as_web, row_lock):
    alice = User.objects.create_user("alice")
    run = start_run("room_temperature", thread_id="t", input={"question": "q"}, owner=alice)
    row_lock(run)
    with pytest.raises(OperationalError) as caught, transaction.atomic():
        Run.objects.select_for_update().filter(pk=run.pk).first()
    assert db_faults.classify(caught.value) == db_faults.BUSY
