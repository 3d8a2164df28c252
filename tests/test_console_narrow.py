"""Every console page on an on-call phone and on a desk: at 390 px and 1,400 px wide the
pages do not scroll sideways (wide tables scroll inside their own box) and axe-core
finds no serious or critical violation, in headless Chromium on the demo data.
Screenshots of each page at each width are kept as test artifacts (not compared)."""

import pytest
from django.urls import reverse

from tests.support.browser import *  # noqa: F403 - fixtures (browser, open_as)
from tests.support.browser import (
    PATIENCE_MS,
    WIDTHS,
    axe_violations,
    horizontal_overflow,
    save_screenshot,
)
from tests.support.in_process import *  # noqa: F403 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_every_console_page_fits_the_width_and_is_clean_under_axe(open_as, demo, width):
    page = open_as("bob", width=width)
    run, long_run = demo["retries_exhausted"], demo["long_history"]
    pages = {
        "overview": reverse("console:overview"),
        "triage": reverse("console:triage"),
        "runs": reverse("console:runs"),
        "run": reverse("console:run", args=[run.pk]),
        "run-long": reverse("console:run", args=[long_run.pk]),
        "run-events": reverse("console:run_events", args=[long_run.pk]),
        "unknowns": reverse("console:unknowns"),
        "approvals": reverse("console:approvals"),
        "takeovers": reverse("console:takeovers"),
        "workers": reverse("console:workers"),
        "audit": reverse("console:audit"),
        "storage": reverse("console:overview_storage"),
        "schedules": reverse("console:schedules"),
        "tokens": reverse("apitokens:tokens"),
        "resume": reverse("console:resume_preview", args=[demo["budget"].pk]) + "?checkpoint=start",
        "replay": reverse("console:replay", args=[demo["failed"].pk]),
        "replay-bulk": reverse("console:bulk_replay") + "?status=FAILED",
    }
    wide, violations = {}, {}
    for name, url in pages.items():
        assert page.goto(page.base + url).status == 200, url
        save_screenshot(page, f"console-{name}-{width}")
        overflow = horizontal_overflow(page)
        if overflow["excess"] > 0:
            wide[name] = overflow
        found = axe_violations(page)
        if found:
            violations[name] = found
    assert wide == {}, f"pages wider than {width} px: {wide}"
    assert violations == {}, violations


@pytest.mark.parametrize("width", WIDTHS)
def test_the_login_page_fits_the_width_and_is_clean_under_axe(browser, live_server, width):
    context = browser.new_context(viewport={"width": width, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(PATIENCE_MS)
        assert page.goto(live_server.url + reverse("login")).status == 200
        save_screenshot(page, f"console-login-{width}")
        overflow = horizontal_overflow(page)
        assert overflow["excess"] <= 0, overflow
        assert axe_violations(page) == []
    finally:
        context.close()
