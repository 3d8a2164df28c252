"""The console and waits: a run's page says what it waits for and until when ("sleeping
until ..." for a timer), operators and approvers send the signal from a form built from
the schema (a viewer gets 403, a bad value changes nothing), and the schedules page
shows next ticks and last runs with pause, resume and trigger now."""

import pytest
from django.urls import reverse

from runs.engine.control import lifecycle, schedules
from runs.models import Event, Run, ScheduleTick, Signal
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_in_process

pytestmark = pytest.mark.django_db(transaction=True)


def waiting_order(delay_s: int = 3600) -> Run:
    run = lifecycle.start_run(
        "order_followup", thread_id="order-7", input={"order": "order-7", "delay_s": delay_s}
    )
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "WAITING_EXTERNAL"
    return run


def test_it_shows_the_wait_and_operators_and_approvers_send_the_signal(clients):
    run = waiting_order()
    page = clients["bob"].get(reverse("console:run", args=[run.pk])).content.decode()
    assert "waiting for signal <code>payment</code> until" in page
    assert 'name="payload.amount"' in page and 'type="number"' in page
    viewer_page = clients["alice"].get(reverse("console:run", args=[run.pk])).content.decode()
    assert 'id="signal-form"' not in viewer_page

    url = reverse("console:signal", args=[run.pk])
    form = {"signal": "payment", "request_id": "form-1"}
    assert clients["alice"].post(url, {**form, "payload.amount": "5"}).status_code == 403
    bad = clients["bob"].post(url, {**form, "payload.amount": "-2"})
    assert bad.status_code == 400 and "invalid_input" in bad.content.decode()
    assert not Signal.objects.exists()

    sent = clients["carol"].post(url, {**form, "payload.amount": "5.5"})
    again = clients["carol"].post(url, {**form, "payload.amount": "5.5"})
    assert sent.status_code == again.status_code == 302
    assert Signal.objects.get().payload == {"amount": 5.5}
    received = Event.objects.get(run=run, type="signal.received")
    assert received.actor == "user:carol"

    run_worker_in_process()
    page = clients["bob"].get(reverse("console:run", args=[run.pk])).content.decode()
    assert "sleeping until" in page


def test_the_schedules_page_shows_next_ticks_and_last_runs_and_acts(clients):
    schedules.create_schedule("nightly", "bench_noop", cron="0 2 * * *", timezone="Europe/Paris")
    page = clients["alice"].get(reverse("console:schedules")).content.decode()
    assert "nightly" in page and "0 2 * * * (Europe/Paris)" in page and "Trigger now" not in page

    act = reverse("console:schedule_action", args=["nightly", "trigger"])
    assert clients["alice"].post(act).status_code == 403
    assert clients["bob"].post(act).status_code == 302
    tick = ScheduleTick.objects.get()
    assert tick.manual and tick.outcome == "started" and tick.run is not None
    page = clients["bob"].get(reverse("console:schedules")).content.decode()
    assert str(tick.run.pk)[:8] in page and "(triggered)" in page

    clients["bob"].post(reverse("console:schedule_action", args=["nightly", "pause"]))
    assert "paused" in clients["bob"].get(reverse("console:schedules")).content.decode()
    missing = clients["bob"].post(reverse("console:schedule_action", args=["nope", "pause"]))
    assert missing.status_code == 409 and "unknown_schedule" in missing.content.decode()
