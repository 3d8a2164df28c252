"""The console in a real headless Chromium: Debian's ``/usr/bin/chromium`` driven by
Playwright for Python through ``executable_path`` (no browser download), axe-core
checks, widths, and screenshots kept as test artifacts.

Use in a test module::

    from tests.support.browser import *  # noqa: F403 - fixtures (browser, open_as)
    from tests.support.browser import axe_violations, no_horizontal_scroll, save_screenshot

    def test_it(open_as):
        page = open_as("carol", width=390)
        page.goto(page.base + "/approvals/")
        assert axe_violations(page) == []

Screenshots go to ``test-artifacts/screenshots/`` (git-ignored; CI may keep them).
"""

import os
import shutil
from pathlib import Path

import pytest
from django.urls import reverse

from tests.support.in_process import PASSWORD, REPO_ROOT

__all__ = [
    "PATIENCE_MS",
    "SCREENSHOTS",
    "WIDTHS",
    "axe_violations",
    "browser",
    "check_desk_page",
    "horizontal_overflow",
    "no_horizontal_scroll",
    "open_as",
    "save_screenshot",
]

CHROMIUM = os.environ.get("AGENTOPS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Where screenshots are kept (git-ignored).
SCREENSHOTS = REPO_ROOT / "test-artifacts" / "screenshots"
#: Upper bound for things a page should show "soon"; not a timing assertion, only how
#: long to wait before giving up.
PATIENCE_MS = 60_000
#: The widths every desk page is checked at: an on-call phone and a desk screen (px).
WIDTHS = (390, 1400)
#: axe-core impacts that fail a page.
FAILING_IMPACTS = ("serious", "critical")


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module."""
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests
    # make between browser steps are ordinary synchronous ones.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def open_as(browser, live_server, actors, request):
    """``open_as(username, width=1400) -> page`` logged in through the real login form,
    in a viewport ``width`` px wide; ``page.base`` is the server's URL and
    ``page.shot(name)`` saves a screenshot named after the test."""
    contexts = []

    def login(username: str, width: int = 1400):
        context = browser.new_context(viewport={"width": width, "height": 1000})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(PATIENCE_MS)
        page.goto(live_server.url + reverse("login"))
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", PASSWORD)
        page.click("#login-form button[type=submit]")
        page.wait_for_url(live_server.url + "/")
        page.base = live_server.url
        page.shot = lambda name: save_screenshot(page, f"{request.node.name}-{name}")
        return page

    yield login
    for context in contexts:
        context.close()


def save_screenshot(page, name: str) -> Path:
    """A full-page PNG of ``page`` as ``SCREENSHOTS/<name>.png``; returns its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def axe_violations(page, impacts: tuple[str, ...] = FAILING_IMPACTS) -> list[dict]:
    """axe-core's violations on ``page`` as it is now, of the given ``impacts``
    (default serious and critical): ``[{"id", "impact", "help", "targets"}]``, where
    ``targets`` are the CSS selectors of the offending elements. Empty: clean."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [
        {
            "id": v["id"],
            "impact": v.get("impact"),
            "help": v.get("help"),
            "targets": [node.get("target") for node in v.get("nodes", [])][:5],
        }
        for v in results.response.get("violations", [])
        if v.get("impact") in impacts
    ]


def horizontal_overflow(page) -> dict:
    """How far ``page`` is wider than its viewport: ``{"excess": px, "widest": [...]}``
    (``excess`` 0: no horizontal scrolling), naming up to five elements that reach past
    the right edge (tag#id.class and their right edge in px)."""
    return page.evaluate(
        """() => {
          const width = document.documentElement.clientWidth;
          const excess = document.documentElement.scrollWidth - width;
          const widest = [];
          if (excess > 0) {
            for (const el of document.body.querySelectorAll("*")) {
              const right = el.getBoundingClientRect().right;
              if (right > width + 1 && widest.length < 5) {
                const cls = typeof el.className === "string" && el.className
                  ? "." + el.className.split(" ").join(".") : "";
                const id = el.id ? "#" + el.id : "";
                widest.push(el.tagName.toLowerCase() + id + cls + " " + Math.round(right));
              }
            }
          }
          return {excess: excess, widest: widest};
        }"""
    )


def no_horizontal_scroll(page) -> bool:
    """True if ``page`` fits its viewport's width (nothing to scroll sideways)."""
    return horizontal_overflow(page)["excess"] <= 0


def check_desk_page(page, name: str) -> None:
    """The page as it is, at each of ``WIDTHS``: no sideways scrolling, no serious or
    critical axe-core violation, a screenshot named ``<name>-<width>``; the viewport is
    left at the widest. Fails the test (``AssertionError``) naming the page and width."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1000})
        overflow = horizontal_overflow(page)
        assert overflow["excess"] <= 0, (name, width, overflow)
        violations = axe_violations(page)
        assert violations == [], (name, width, violations)
        page.shot(f"{name}-{width}")
    page.set_viewport_size({"width": WIDTHS[-1], "height": 1000})
