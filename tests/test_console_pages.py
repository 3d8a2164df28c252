"""Console pages: every page renders for every role, login and the view permission are
required, htmx gets fragments, lists filter, untrusted output is escaped, and query
counts do not grow with the number of runs."""

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from lab import demo_seed
from runs.models import Approval, Message, Run, Takeover
from tests.support.in_process import *  # noqa: F403 - fixtures

pytestmark = pytest.mark.django_db

HOSTILE = ['<script>alert("pwned")</script>', "<img src=x onerror=alert(1)>"]


def page_urls(demo) -> list[str]:
    paused = demo["retries_exhausted"]
    return [
        reverse("console:overview"),
        reverse("console:triage"),
        reverse("console:runs"),
        reverse("console:runs") + "?status=PAUSED&stuck=false&o=-updated",
        reverse("console:run", args=[paused.pk]),
        reverse("console:run", args=[demo["long_history"].pk]),
        reverse("console:run_events", args=[demo["long_history"].pk]),
        reverse("console:unknowns"),
        reverse("console:approvals"),
        reverse("console:takeovers"),
        reverse("console:workers"),
        reverse("console:audit"),
    ]


def test_it_renders_every_page_for_every_role(clients, demo):
    for name in ("alice", "bob", "carol"):
        for url in page_urls(demo):
            response = clients[name].get(url)
            assert response.status_code == 200, (name, url)
            assert b"<html" in response.content


def test_it_refuses_a_logged_in_user_without_the_view_permission(clients, demo):
    for url in page_urls(demo):
        assert clients["dave"].get(url).status_code == 403, url


def test_it_sends_anonymous_visitors_to_the_login_page(demo):
    for url in page_urls(demo):
        response = Client().get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")


def test_it_renders_only_the_fragment_for_htmx_requests(clients, demo):
    run = demo["running"]
    for url in (
        reverse("console:overview"),
        reverse("console:run", args=[run.pk]),
        reverse("console:runs") + "?status=RUNNING",
        reverse("console:triage"),
    ):
        response = clients["alice"].get(url, HTTP_HX_REQUEST="true")
        assert response.status_code == 200
        assert b"<html" not in response.content, url
    live = clients["alice"].get(reverse("console:run", args=[run.pk]), HTTP_HX_REQUEST="true")
    assert (
        b'id="run-live"' in live.content
        and b'hx-trigger="run-moved from:body, every 5s"' in live.content
    )


def test_it_asks_htmx_to_reload_the_page_when_the_run_changed_state(clients, demo):
    run = demo["running"]
    url = reverse("console:run", args=[run.pk])
    same = clients["alice"].get(url, {"shown_version": run.version}, HTTP_HX_REQUEST="true")
    assert same.status_code == 200 and "HX-Refresh" not in same
    moved = clients["alice"].get(url, {"shown_version": run.version - 1}, HTTP_HX_REQUEST="true")
    assert moved["HX-Refresh"] == "true"


def test_it_stops_polling_a_finished_run(clients, demo):
    response = clients["alice"].get(
        reverse("console:run", args=[demo["succeeded"].pk]), HTTP_HX_REQUEST="true"
    )
    assert b"hx-trigger" not in response.content


def test_it_serves_the_vendored_htmx_and_sends_the_csrf_token_in_hx_headers(clients):
    page = clients["alice"].get(reverse("console:overview")).content.decode()
    assert 'src="/static/runs/htmx.min.js"' in page
    assert 'hx-headers=\'{"X-CSRFToken": "' in page
    assert "unpkg" not in page and "cdn" not in page.lower()


def test_every_page_has_a_favicon_and_favicon_ico_finds_it(client, clients):
    page = clients["alice"].get(reverse("console:overview")).content.decode()
    assert 'rel="icon" href="/static/runs/favicon.svg"' in page
    asked = client.get("/favicon.ico")
    assert (asked.status_code, asked["Location"]) == (301, "/static/runs/favicon.svg")
    icon = client.get("/static/runs/favicon.svg")
    assert icon.status_code == 200 and icon["Content-Type"] == "image/svg+xml"
    assert b"<svg" in b"".join(icon.streaming_content)


def test_it_shows_action_buttons_only_to_roles_that_may_use_them(clients, demo):
    paused = reverse("console:run", args=[demo["retries_exhausted"].pk])
    viewer, operator = clients["alice"].get(paused), clients["bob"].get(paused)
    assert b"Cancel run" not in viewer.content and b"Cancel run" in operator.content
    assert b"Retry step" not in viewer.content and b"Retry step" in operator.content
    approvals = reverse("console:approvals")
    # Some demo approvals are past their expiry, and an expired one shows no buttons.
    Approval.objects.filter(status="PENDING").update(expires_at=None)
    assert b"Approve</button>" not in clients["bob"].get(approvals).content
    assert b"Approve</button>" in clients["carol"].get(approvals).content
    unknowns = reverse("console:unknowns")
    assert b"Check the outside world now" not in clients["carol"].get(unknowns).content
    assert b"Check the outside world now" in clients["bob"].get(unknowns).content


def test_it_lists_every_cause_in_the_triage_inbox(clients, demo):
    page = clients["alice"].get(reverse("console:triage")).content.decode()
    for cause, scenario in [
        ("unknown_outcome", "unknown"),
        ("retries_exhausted", "retries_exhausted"),
        ("budget_exhausted", "budget"),
        ("no_progress", "stuck"),
        ("unknown_workflow_version", "version"),
        ("lease_expired", "lease_expired"),
    ]:
        section = page.split(f'id="group-{cause}"')[1].split("</section>")[0]
        assert str(demo[scenario].pk)[:8] in section, cause


def test_it_filters_sorts_and_pages_the_runs_list(clients, demo):
    runs_url = reverse("console:runs")
    paused = clients["alice"].get(runs_url, {"status": "PAUSED"}).context["runs"]
    assert paused and all(r.status == "PAUSED" for r in paused)
    unknown = list(clients["alice"].get(runs_url, {"has_unknown": "true"}).context["runs"])
    assert [r.pk for r in unknown] == [demo["unknown"].pk]
    stuck = {r.pk for r in clients["alice"].get(runs_url, {"stuck": "true"}).context["runs"]}
    assert demo["stuck"].pk in stuck and demo["succeeded"].pk not in stuck
    by_id = clients["alice"].get(runs_url, {"q": str(demo["budget"].pk)[:8]}).context["runs"]
    assert [r.pk for r in by_id] == [demo["budget"].pk]
    by_thread = clients["alice"].get(runs_url, {"thread": demo["failed"].thread.thread_id})
    assert [r.pk for r in by_thread.context["runs"]] == [demo["failed"].pk]
    workflow = clients["alice"].get(runs_url, {"workflow": "weekly_report", "o": "status"})
    statuses = [r.status for r in workflow.context["runs"]]
    assert statuses == sorted(statuses) and all(
        r.workflow == "weekly_report" for r in workflow.context["runs"]
    )
    demo_seed.Seeder(60, seed=3).seed()
    first = clients["alice"].get(runs_url)
    assert len(first.context["runs"]) == 50 and first.context["page"].has_next()
    second = clients["alice"].get(runs_url, {"page": 2})
    assert {r.pk for r in second.context["runs"]}.isdisjoint({r.pk for r in first.context["runs"]})


def test_it_filters_the_audit_log_by_user_action_and_run(clients, demo):
    url = reverse("console:audit")
    everything = clients["alice"].get(url).context["events"]
    assert everything and all(e.actor.startswith("user:") or e.actor == "cli" for e in everything)
    mine = clients["alice"].get(url, {"user": "operator", "action": "run.cancel_requested"})
    assert mine.context["events"] and all(
        e.actor == "user:operator" and e.type == "run.cancel_requested"
        for e in mine.context["events"]
    )
    run = demo["cancelled"]
    by_run = clients["alice"].get(url, {"run": str(run.pk)}).context["events"]
    assert by_run and {e.run_id for e in by_run} == {run.pk}


def _plant_hostile_payloads(demo) -> Run:
    run = demo["unknown"]
    thread = run.thread
    for i, text in enumerate(HOSTILE, start=100):
        Message.objects.create(
            thread=thread,
            run=run,
            seq=i,
            message_id=f"msg_hostile_{i}",
            role="assistant",
            content=text,
            tool_calls=[{"id": f"call_x{i}", "name": text, "arguments": {"q": text}}],
        )
    Takeover.objects.filter(run=run).update(reason=HOSTILE[0], evidence={"page": HOSTILE[1]})
    Approval.objects.filter(run=demo["waiting_approval"]).update(
        question=HOSTILE[1], reason=HOSTILE[0], evidence={"excerpt": HOSTILE[0] + HOSTILE[1]}
    )
    return run


def test_it_shows_script_and_onerror_payloads_as_text(clients, demo):
    run = _plant_hostile_payloads(demo)
    pages = [
        reverse("console:run", args=[run.pk]),
        reverse("console:approvals"),
        reverse("console:takeovers"),
        reverse("console:triage"),
        reverse("console:unknowns"),
    ]
    for url in pages:
        body = clients["bob"].get(url).content.decode()
        assert "<script>alert" not in body, url
        assert "<img src=x onerror" not in body, url
    detail = clients["bob"].get(pages[0]).content.decode()
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in detail
    assert "&lt;img src=x onerror=alert(1)&gt;" in detail
    assert "&lt;img src=x onerror=alert(1)&gt;" in clients["bob"].get(pages[1]).content.decode()
    assert "&lt;script&gt;alert" in clients["bob"].get(pages[2]).content.decode()


def test_it_truncates_long_payloads_with_a_way_to_see_all(clients, demo):
    run = demo["succeeded"]
    long_text = "x" * 3000 + "THE-END"
    Message.objects.create(
        thread=run.thread,
        run=run,
        seq=99,
        message_id="msg_long",
        role="assistant",
        content=long_text,
    )
    body = clients["alice"].get(reverse("console:run", args=[run.pk])).content.decode()
    assert "<details" in body and "THE-END" in body.split("<details")[-1]
    assert "3007 chars, show all" in body


def test_a_huge_hostile_payload_is_shown_escaped_and_cut(clients, demo):
    run = demo["succeeded"]
    Message.objects.create(
        thread=run.thread,
        run=run,
        seq=98,
        message_id="msg_huge",
        role="assistant",
        content="\x1b[2J\u202e" + "x" * 3_000_000,
    )
    body = clients["alice"].get(reverse("console:run", args=[run.pk])).content.decode()
    assert "\\u001b[2J\\u202e" in body and "\x1b" not in body and "\u202e" not in body
    assert "3000005 chars, show more" in body and "the value has 3000005 characters" in body
    # Only the preview and the fold reach the page.
    assert len(body) < 200_000


def _queries(client, url) -> int:
    # The storage figures are cached for a minute: every visit pays for them, so the
    # count does not depend on when the cache last expired.
    cache.clear()
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_it_uses_the_same_number_of_queries_for_50_runs_as_for_5(clients, actors):
    urls = [
        reverse(name)
        for name in (
            "console:runs",
            "console:triage",
            "console:overview",
            "console:overview_storage",
            "console:unknowns",
            "console:approvals",
            "console:takeovers",
            "console:workers",
            "console:audit",
        )
    ]
    # The 5 include one of each item the pages list, so no page skips an empty query.
    demo_seed.Seeder(
        5,
        seed=11,
        scenarios=["unknown", "waiting_approval", "retries_exhausted", "stuck", "cancel_requested"],
    ).seed()
    few = {url: _queries(clients["bob"], url) for url in urls}
    demo_seed.Seeder(45, seed=12).seed()
    assert Run.objects.count() == 50
    many = {url: _queries(clients["bob"], url) for url in urls}
    assert many == few


def test_it_uses_the_same_number_of_queries_for_a_short_and_a_long_run(clients, demo):
    short = _queries(clients["alice"], reverse("console:run", args=[demo["succeeded"].pk]))
    long = _queries(clients["alice"], reverse("console:run", args=[demo["long_history"].pk]))
    assert Run.objects.get(pk=demo["long_history"].pk).event_seq > 200
    assert long == short


def test_it_narrows_the_takeover_desk_and_approvals_to_one_run(clients, demo):
    run = demo["budget"]
    page = clients["alice"].get(reverse("console:takeovers"), {"run": str(run.pk)})
    assert [t.run_id for t in page.context["open"]] == [run.pk]
    everything = clients["alice"].get(reverse("console:takeovers"))
    assert len(everything.context["open"]) > 1
    waiting = demo["waiting_approval"]
    approvals = clients["alice"].get(reverse("console:approvals"), {"run": str(waiting.pk)})
    assert [a.run_id for a in approvals.context["pending"]] == [waiting.pk]
    nope = clients["alice"].get(reverse("console:approvals"), {"run": "nope"})
    assert list(nope.context["pending"]) == []


def test_the_overview_loads_storage_as_a_panel_of_its_own(clients, demo):
    """Counting storage scans every stored row: the overview's figures do not wait for
    it; htmx loads the panel from its own URL, which also works as a page."""
    cache.clear()
    storage = reverse("console:overview_storage")
    with CaptureQueriesContext(connection) as overview_queries:
        page = clients["bob"].get(reverse("console:overview")).content.decode()
    assert f'hx-get="{storage}" hx-trigger="load, every 60s"' in page
    assert '<table id="storage">' not in page
    assert not any("LENGTH" in q["sql"].upper() for q in overview_queries.captured_queries)
    fragment = clients["bob"].get(storage, HTTP_HX_REQUEST="true")
    body = fragment.content.decode()
    assert fragment.status_code == 200 and body.startswith('<table id="storage">')
    workflows = set(Run.objects.values_list("workflow", flat=True))
    assert workflows and all(f"<td>{w}</td>" in body for w in workflows)
    full = clients["bob"].get(storage).content.decode()
    assert "<h1>Storage per workflow</h1>" in full and '<table id="storage">' in full
    assert Client().get(storage).status_code == 302  # the login page, as for the overview
