"""Operator text reads well: no ``None`` on any console page, times for people with the
exact ISO value in a ``title``, and the verify hook never says "None%"."""

import re
from datetime import UTC, datetime, timedelta

import pytest

from lab.sim import devices
from runs.engine.effects.unknown_outcomes import verify_now
from runs.models import Operation, Step
from runs.states import StepStatus
from runs.templatetags.console import human_time
from tests.support.in_process import actors, clients, demo, device_dir, fast_passwords

__all__ = ["actors", "clients", "demo", "device_dir", "fast_passwords"]

pytestmark = pytest.mark.django_db

LIST_PAGES = ["/", "/triage/", "/runs/", "/unknowns/", "/approvals/", "/takeovers/",
              "/workers/", "/audit/", "/tokens/"]  # fmt: skip


def _visible_text(html: str) -> str:
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def test_no_page_shows_none(clients, demo):
    client = clients["bob"]
    urls = LIST_PAGES + [f"/runs/{run.pk}/" for run in demo.values()]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        text = _visible_text(response.content.decode())
        # "None yet." is English; a bare None is a Python value that leaked.
        leaked = re.findall(r".{0,60}\bNone\b(?! yet).{0,40}", text)
        assert not leaked, (url, leaked)


def test_the_overview_shows_a_time_for_people_with_the_iso_value_as_title(clients):
    html = clients["alice"].get("/").content.decode()
    match = re.search(r'As of <time datetime="([^"]+)" title="\1">([^<]+)</time>', html)
    assert match, html[:2000]
    iso, text = match.groups()
    assert datetime.fromisoformat(iso).tzinfo is not None
    assert (
        not re.search(r"\d{4}-\d\d-\d\dT", text)
        and text.endswith(("(just now)", "ago)"))
        and " UTC" in text
    )


def test_human_time_reads_like_a_clock_and_says_how_long_ago():
    now = datetime(2026, 11, 30, 12, 52, 14, tzinfo=UTC)
    assert (
        human_time("2026-11-30T12:49:14.162000+00:00", now)
        == "30 Nov 2026 12:49:14 UTC (2m 59s ago)"
    )
    assert human_time(now + timedelta(seconds=20), now) == "30 Nov 2026 12:52:34 UTC (in 20.0s)"
    assert human_time(now - timedelta(days=30), now) == "31 Oct 2026 12:52:14 UTC"
    assert human_time(None) == "" and human_time("not a time") == ""


def test_verify_never_says_none_percent_when_the_previous_value_is_unknown(demo):
    run = demo["unknown"]
    step = Step.objects.get(run=run, status=StepStatus.UNKNOWN)
    # A ledger row from before the previous value was recorded with the call.
    Operation.objects.filter(step=step).update(arguments={"brightness": 70})
    devices.set_lamp_brightness(55, run_id="someone-else")
    answer = verify_now(step, actor="user:bob")
    assert answer.status == "cannot_tell"
    assert "None" not in answer.evidence and "55%" in answer.evidence


def test_agent_and_operator_text_shows_controls_and_bidi_overrides_as_escapes(clients):
    """A bidirectional override (U+202E) would reorder what the operator reads and an
    ESC starts a terminal sequence: the console shows both as ``\\uXXXX`` in a message,
    never the raw character, and keeps tabs and newlines."""
    from runs.engine.service import post_message

    text = "pay \u202eTSIL\u202c to \x1b[31mred\x9b\tand\nnext"
    run = post_message("bidi", text).run
    page = clients["bob"].get(f"/runs/{run.pk}/").content.decode()
    assert "pay \\u202eTSIL\\u202c to \\u001b[31mred\\u009b\tand\nnext" in page
    for char in ("\u202e", "\u202c", "\x1b", "\x9b"):
        assert char not in page, repr(char)
