"""Every console list is paged and filtered like the runs list: walking the pages of
the approvals inbox, the takeover desk and the unknown outcomes shows every row once."""

import re

import pytest

from lab import demo_seed
from runs.models import Approval, Step, Takeover
from runs.states import StepStatus
from tests.support.in_process import actors, clients, device_dir, fast_passwords

__all__ = ["actors", "clients", "device_dir", "fast_passwords"]

pytestmark = pytest.mark.django_db


def _walk(client, url, context_key, params=None):
    """Every row of every page of ``url``'s ``context_key`` page, and the page count."""
    seen, number, pages = [], 1, 0
    while True:
        response = client.get(url, {**(params or {}), "page": number})
        assert response.status_code == 200
        page = response.context[context_key]
        seen += [row.pk for row in page]
        pages += 1
        if not page.has_next():
            return seen, pages, response.content.decode()
        number += 1


def test_the_approvals_inbox_pages_through_every_pending_approval(clients):
    demo_seed.Seeder(120, seed=3, scenarios=["waiting_approval"] * 120).seed()
    pending = set(Approval.objects.filter(status="PENDING").values_list("pk", flat=True))
    assert len(pending) == 120
    seen, pages, html = _walk(clients["alice"], "/approvals/", "pending")
    assert sorted(seen) == sorted(pending) and pages == 3
    assert "Pending (120)" in html and "page 3 of 3" in html


def test_the_takeover_desk_pages_and_filters_like_the_runs_list(clients):
    demo_seed.Seeder(110, seed=4, scenarios=["budget"] * 60 + ["retries_exhausted"] * 50).seed()
    open_ids = set(Takeover.objects.filter(status="OPEN").values_list("pk", flat=True))
    seen, pages, _ = _walk(clients["bob"], "/takeovers/", "open")
    assert sorted(seen) == sorted(open_ids) and pages == 3
    budget, _, html = _walk(clients["bob"], "/takeovers/", "open", {"cause": "budget_exhausted"})
    assert len(budget) == 60
    assert set(budget) == set(
        Takeover.objects.filter(cause="budget_exhausted").values_list("pk", flat=True)
    )
    # The next page's link keeps the filter.
    assert not re.search(r'href="\?page=2"', html)
    one = Takeover.objects.order_by("pk").first()
    narrowed, _, _ = _walk(clients["bob"], "/takeovers/", "open", {"q": str(one.run_id)[:13]})
    assert narrowed == [one.pk]


def test_the_unknown_outcomes_page_and_filter(clients):
    demo_seed.Seeder(60, seed=5, scenarios=["unknown"] * 60).seed()
    unknown = set(Step.objects.filter(status=StepStatus.UNKNOWN).values_list("pk", flat=True))
    seen, pages, _ = _walk(clients["bob"], "/unknowns/", "page")
    assert sorted(seen) == sorted(unknown) and pages == 2
    step = Step.objects.filter(status=StepStatus.UNKNOWN).select_related("run__thread").first()
    narrowed, _, _ = _walk(
        clients["bob"], "/unknowns/", "page", {"thread": step.run.thread.thread_id}
    )
    assert narrowed == [step.pk]


def test_the_filters_offer_state_chips_any_for_yes_no_and_datetime_local(clients):
    from runs.engine.control.lifecycle import start_run
    from runs.models import Run
    from tests.support.states import arrange

    old = start_run("room_temperature", thread_id="F1", input={"question": "warm?"})
    new = start_run("room_temperature", thread_id="F2", input={"question": "warm?"})
    arrange(Run.objects.filter(pk=old.pk), status="PAUSED", created_at="2026-01-01T08:00Z")
    arrange(Run.objects.filter(pk=new.pk), created_at="2026-03-01T08:00Z")
    page = clients["alice"].get("/runs/").content.decode()
    assert re.search(r'<legend>State</legend>\s*<div id="id_status" class="chips">', page)
    assert page.count('type="checkbox" name="status"') == 9
    assert '<option value="unknown" selected>any</option>' in page
    assert ">Unknown<" not in page
    assert 'type="datetime-local" name="created_after"' in page
    assert 'aria-label="Created: to"' in page

    def listed(**params):
        response = clients["alice"].get("/runs/", params)
        assert response.status_code == 200
        return {r.pk for r in response.context["page"].object_list}

    # As a browser sends them: a datetime-local value, ticked chips, "any".
    assert listed(created_after="2026-02-01T00:00", stuck="unknown") == {new.pk}
    assert listed(created_before="2026-02-01T00:00") == {old.pk}
    assert listed(status=["PAUSED", "PENDING"]) == {old.pk, new.pk}
    assert listed(status=["PAUSED"]) == {old.pk}
    chosen = clients["alice"].get("/runs/", {"status": "PAUSED"}).content.decode()
    assert 'value="PAUSED" class="chips" id="id_status_4" checked' in chosen
    # A date alone still works (links and scripts that used the old date inputs).
    assert listed(created_after="2026-02-01") == {new.pk}
    bad = clients["alice"].get("/runs/", {"created_after": "yesterday"})
    assert bad.status_code in (200, 400) and new.pk.hex not in bad.content.decode()
