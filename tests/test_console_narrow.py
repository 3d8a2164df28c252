"""The console on an on-call phone: at 390 px wide the overview, approvals, takeovers
and run pages do not scroll sideways (wide tables scroll inside their own box), in
headless Chromium on the demo data; at 1400 px too. Screenshots of each page at each
width go under ``var/screenshots/`` (not compared)."""

import os
import shutil
from pathlib import Path

import pytest
from django.urls import reverse

from tests.console_helpers import PASSWORD, REPO_ROOT, actors, demo, device_dir, fast_passwords

__all__ = ["actors", "demo", "device_dir", "fast_passwords"]

pytestmark = pytest.mark.django_db(transaction=True)

CHROMIUM = os.environ.get("AGENTOPS_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = REPO_ROOT / "var" / "screenshots"


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module (Debian's; no browser download)."""
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        yield chromium
        chromium.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.mark.parametrize("width", [390, 1400])
def test_the_desk_pages_do_not_scroll_sideways(browser, live_server, demo, width):
    context = browser.new_context(viewport={"width": width, "height": 844})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(live_server.url + reverse("login"))
    page.fill("input[name=username]", "bob")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-form button[type=submit]")
    page.wait_for_url(live_server.url + "/")
    pages = {
        "overview": reverse("console:overview"),
        "approvals": reverse("console:approvals"),
        "takeovers": reverse("console:takeovers"),
        "run": reverse("console:run", args=[demo["retries_exhausted"].pk]),
        "run-long": reverse("console:run", args=[demo["long_history"].pk]),
    }
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    wide = {}
    for name, url in pages.items():
        assert page.goto(live_server.url + url).status == 200, url
        page.screenshot(path=str(SCREENSHOTS / f"narrow-{name}-{width}.png"), full_page=True)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        if overflow > 0:
            wide[name] = overflow
    context.close()
    assert wide == {}, f"pages wider than {width} px (by how many px): {wide}"
