"""The run page's events: newest first, a bounded chunk at a time ("load more" asks
for the next older chunk, with htmx or as a plain link), new ones added at the top while
the run is not terminal; a run with 10,000 events renders the same bounded number of
rows with the same number of queries as a short one."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from runs.models import Event, Run
from runs.views.run_detail import EVENTS_CHUNK
from tests.support.in_process import (
    actors,
    clients,
    device_dir,
    fast_passwords,
    start_room_temperature,
)
from tests.support.states import arrange

__all__ = ["actors", "clients", "device_dir", "fast_passwords"]

pytestmark = pytest.mark.django_db

EVENT_ROW = re.compile(r'<tr class="event-row"><td>(\d+)</td>')


def _long_run(total: int) -> Run:
    """A real run whose log is padded to ``total`` events (the engine's own first
    events, then heartbeat-like notes), as a 10,000-iteration loop leaves it."""
    run = start_room_temperature("T-long")
    first = run.event_seq
    Event.objects.bulk_create(
        Event(run=run, seq=seq, type="step.note", payload={"n": seq}, actor="test")
        for seq in range(first + 1, total + 1)
    )
    arrange(Run.objects.filter(pk=run.pk), event_seq=total)
    run.refresh_from_db()
    return run


def _seqs(html: str) -> list[int]:
    return [int(s) for s in EVENT_ROW.findall(html)]


def test_a_run_of_10000_events_shows_the_newest_chunk_and_loads_older_ones(clients):
    run = _long_run(10_000)
    page = clients["alice"].get(reverse("console:run", args=[run.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert _seqs(html) == list(range(10_000, 10_000 - EVENTS_CHUNK, -1))
    more = reverse("console:run_events", args=[run.pk]) + f"?before={10_001 - EVENTS_CHUNK}"
    assert f'href="{more}" hx-get="{more}" hx-target="closest tr"' in html
    # The live row follows the newest event shown.
    assert "?after=10000" in html and 'id="events-live"' in html

    # htmx asks for the next chunk: rows only, ending with the next "load more" row.
    chunk = clients["alice"].get(more, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in chunk
    assert _seqs(chunk) == list(range(10_000 - EVENTS_CHUNK, 10_000 - 2 * EVENTS_CHUNK, -1))
    assert f"?before={10_001 - 2 * EVENTS_CHUNK}" in chunk
    # Without JavaScript the link is a page of its own, continuing below the same seq.
    plain = clients["alice"].get(more).content.decode()
    assert "<html" in plain and _seqs(plain) == _seqs(chunk) and 'id="events-live"' not in plain
    # The oldest chunk has no "load more".
    last = clients["alice"].get(
        reverse("console:run_events", args=[run.pk]), {"before": 3}, HTTP_HX_REQUEST="true"
    )
    assert _seqs(last.content.decode()) == [2, 1] and "Load older" not in last.content.decode()


def test_the_run_page_costs_the_same_queries_for_10000_events_as_for_a_few(clients):
    short = start_room_temperature("T-short")

    def queries(run):
        with CaptureQueriesContext(connection) as captured:
            assert clients["alice"].get(reverse("console:run", args=[run.pk])).status_code == 200
        return len(captured.captured_queries)

    few = queries(short)
    assert queries(_long_run(10_000)) == few


def test_new_events_are_added_at_the_top_while_the_run_moves(clients):
    run = start_room_temperature("T-live")
    top = run.event_seq
    events_url = reverse("console:run_events", args=[run.pk])
    nothing = clients["alice"].get(events_url, {"after": top}, HTTP_HX_REQUEST="true")
    assert _seqs(nothing.content.decode()) == [] and f"?after={top}" in nothing.content.decode()
    Event.objects.bulk_create(
        Event(run=run, seq=seq, type="step.note", payload={}, actor="test")
        for seq in (top + 1, top + 2)
    )
    arrange(Run.objects.filter(pk=run.pk), event_seq=top + 2)
    fresh = clients["alice"].get(events_url, {"after": top}, HTTP_HX_REQUEST="true")
    body = fresh.content.decode()
    assert _seqs(body) == [top + 2, top + 1]
    # The live row comes first and now follows the newest seq.
    assert body.index(f"?after={top + 2}") < body.index('<tr class="event-row">')


@pytest.mark.parametrize("bad", ["x", "-1", "1.5", "99999999999", "١٢"])
def test_a_bad_seq_is_a_400(clients, bad):
    run = start_room_temperature("T-bad")
    response = clients["alice"].get(reverse("console:run_events", args=[run.pk]), {"before": bad})
    assert response.status_code == 400
    assert b"must be an event seq" in response.content
