"""Replay on the console: the run page's button and links, the preview with reused
side effects, the runs list's "Replay N matching runs" with its confirmation page, the
filters, the audit log; operators only (a viewer sees no button and gets 403)."""

import pytest
from django.urls import reverse

from runs.engine.control.replay import replay_run
from runs.models import Event, RefusedAction, Run
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import failed_runs

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_operator_sees_the_replay_button_and_a_viewer_does_not(clients):
    [run] = failed_runs(1, "C")
    page = clients["bob"].get(reverse("console:run", args=[run.pk])).content.decode()
    assert 'id="replay-link"' in page
    page = clients["alice"].get(reverse("console:run", args=[run.pk])).content.decode()
    assert 'id="replay-link"' not in page and "replay from here" not in page
    listing = clients["alice"].get(reverse("console:runs")).content.decode()
    assert 'id="replay-all"' not in listing


@pytest.mark.parametrize("who", ["alice", "carol", "dave"])
def test_anyone_but_an_operator_gets_403_from_the_replay_views(clients, who):
    [run] = failed_runs(1, "C")
    url = reverse("console:replay", args=[run.pk])
    assert clients[who].get(url).status_code == 403
    assert clients[who].post(url, {"reason": "x"}).status_code == 403
    bulk = reverse("console:bulk_replay")
    assert clients[who].get(bulk).status_code == 403
    assert clients[who].post(bulk, {"reason": "x", "count": "1"}).status_code == 403
    assert not Run.objects.filter(replay_of__isnull=False).exists()


def test_an_operator_previews_and_replays_a_run_and_both_pages_link(clients):
    [run] = failed_runs(1, "C")
    url = reverse("console:replay", args=[run.pk])
    preview = clients["bob"].get(url)
    assert preview.status_code == 200
    text = preview.content.decode()
    assert "Replaying from <code>start</code>" in text and 'id="ops-reused"' in text
    assert Run.objects.count() == 1  # the preview changes nothing
    response = clients["bob"].post(url, {"checkpoint": "start", "reason": "lamp fixed"})
    [new] = run.replays.all()
    assert response.status_code == 302 and response["Location"] == reverse(
        "console:run", args=[new.pk]
    )
    new_page = clients["bob"].get(reverse("console:run", args=[new.pk])).content.decode()
    assert 'id="replay-of"' in new_page and str(run.pk) in new_page
    old_page = clients["bob"].get(reverse("console:run", args=[run.pk])).content.decode()
    assert 'id="replayed-as"' in old_page and str(new.pk)[:8] in old_page
    # Without "again" a second replay is refused.
    again = clients["bob"].post(url, {"checkpoint": "start", "reason": "twice"})
    assert again.status_code == 409 and b"already_replayed" in again.content
    refused = list(RefusedAction.objects.values_list("actor", "status_code", "code"))
    assert refused == [("user:bob", 409, "already_replayed")]
    # The audit log names who replayed what, why and from which checkpoint.
    audit = clients["bob"].get(reverse("console:audit"), {"action": "run.replay_created"})
    body = audit.content.decode()
    assert "user:bob" in body and "lamp fixed" in body and "start" in body


def test_it_needs_a_reason(clients):
    [run] = failed_runs(1, "C")
    url = reverse("console:replay", args=[run.pk])
    response = clients["bob"].post(url, {"checkpoint": "start", "reason": " "})
    assert response.status_code == 400
    assert not run.replays.exists()


def test_an_unknown_checkpoint_is_invalid_input(clients):
    [run] = failed_runs(1, "C")
    url = reverse("console:replay", args=[run.pk])
    response = clients["bob"].post(url, {"checkpoint": "nowhere", "reason": "r"})
    assert response.status_code == 400 and b"unknown_checkpoint" in response.content
    assert not run.replays.exists()


def test_the_runs_list_filters_replays_and_replayed_runs(clients):
    first, second = failed_runs(2, "C")
    new = replay_run(first, actor="cli", reason="x")
    runs = reverse("console:runs")

    def listed(**params):
        html = clients["bob"].get(runs, params).content.decode()
        return {r.pk for r in (first, second, new) if f"{str(r.pk)[:8]}</a>" in html}

    assert listed(is_replay="true") == {new.pk}
    assert listed(is_replay="false") == {first.pk, second.pk}
    assert listed(was_replayed="true") == {first.pk}
    assert listed(was_replayed="false") == {second.pk, new.pk}


def test_replay_all_matching_runs_confirms_the_count_then_replays_them(clients):
    runs = failed_runs(3, "C")
    listing = clients["bob"].get(reverse("console:runs"), {"status": "FAILED"}).content.decode()
    assert "Replay 3 matching runs" in listing
    confirm = clients["bob"].get(reverse("console:bulk_replay"), {"status": "FAILED"})
    text = confirm.content.decode()
    assert "Replay 3 matching runs?" in text and 'id="replay-sample"' in text
    assert Run.objects.count() == 3
    # A confirmation of another count is refused: the selection changed.
    stale = clients["bob"].post(
        reverse("console:bulk_replay"),
        {"filter": "status=FAILED", "count": "2", "reason": "fixed", "rate": "100"},
    )
    assert stale.status_code == 409 and Run.objects.count() == 3
    done = clients["bob"].post(
        reverse("console:bulk_replay"),
        {"filter": "status=FAILED", "count": "3", "reason": "fixed", "rate": "100"},
    )
    assert done.status_code == 200
    assert Run.objects.filter(replay_of__in=runs).count() == 3
    events = Event.objects.filter(type="run.replay_created")
    assert {e.actor for e in events} == {"user:bob"} and events.count() == 3
    listing = clients["bob"].get(reverse("console:runs"), {"status": "FAILED"}).content.decode()
    assert 'id="replay-all"' not in listing
