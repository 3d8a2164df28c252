"""Every console page on an on-call phone and on a desk: at 390 px and 1,400 px wide the
pages do not scroll sideways (wide tables scroll inside their own box) and axe-core
finds no serious or critical violation, in headless Chromium on the demo data.
Screenshots of each page at each width are kept as test artifacts (not compared)."""

import pytest
from django.urls import reverse

from tests.console_helpers import *  # noqa: F403 - fixtures
from tests.support.browser import *  # noqa: F403 - fixtures (browser, open_as)
from tests.support.browser import WIDTHS, axe_violations, horizontal_overflow, save_screenshot

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
