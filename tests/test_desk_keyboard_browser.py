"""The desk by keyboard alone, in headless Chromium (``tests.support.browser``): an
approver edits and approves an agent's call with j/e, typing, Tab and Space; an
operator claims and resolves a takeover card with Tab, Space and Enter; and on every
console page, Tab reaches each visible interactive element with a visible focus mark."""

import re

import pytest
from django.urls import reverse

from runs.engine.control import lifecycle
from runs.models import Approval, Event, Takeover
from tests.support.browser import *  # noqa: F403 - fixtures (browser, open_as)
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_in_process, start_room_temperature

pytestmark = pytest.mark.django_db(transaction=True)

#: The focused element as a comparable key, and whether its focus is visible (an
#: outline or a box shadow drawn by :focus-visible).
FOCUSED = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const style = getComputedStyle(el);
  const outlined = style.outlineStyle !== "none" && parseFloat(style.outlineWidth) > 0;
  return {key: window.__kbKey(el), visible: outlined || style.boxShadow !== "none",
          what: el.outerHTML.slice(0, 120)};
}"""

#: Marks each visible, enabled interactive element with a key and lists the keys; a
#: radio group counts once (Tab enters a group at one of its radios).
REACHABLE = """() => {
  window.__kbKey = function (el) {
    if (el.type === "radio") {
      return "radio:" + (el.form ? el.form.id || el.form.action : "") + ":" + el.name;
    }
    if (!el.dataset.kb) el.dataset.kb = "k" + (window.__kbNext = (window.__kbNext || 0) + 1);
    return el.dataset.kb;
  };
  const selector = 'a[href], button, input:not([type=hidden]), select, textarea, summary, '
    + '[tabindex]:not([tabindex="-1"])';
  return Array.from(document.querySelectorAll(selector))
    .filter((el) => !el.disabled && el.checkVisibility({visibilityProperty: true}))
    .map((el) => [window.__kbKey(el), el.outerHTML.slice(0, 160)]);
}"""


def tab_through(page) -> tuple[list[str], list[str]]:
    """Tab from the top of ``page`` until focus comes back round (or twice the number of
    interactive elements): the elements (HTML, cut) Tab never reached and those focused
    without a visible focus mark."""
    # Panels htmx loads on arrival (the overview's storage) replace their placeholder first.
    page.wait_for_load_state("networkidle")
    expected = dict(page.evaluate(REACHABLE))
    page.evaluate("() => { document.activeElement && document.activeElement.blur(); }")
    reached, unmarked, first = set(), [], None
    for _ in range(2 * len(expected) + 10):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED)
        if focused is None:
            continue
        if focused["key"] == first:
            break
        first = first or focused["key"]
        reached.add(focused["key"])
        if not focused["visible"]:
            unmarked.append(focused["what"])
    return [html for key, html in expected.items() if key not in reached], unmarked


def tab_to(page, selector: str, limit: int = 400) -> None:
    """Press Tab until the element ``selector`` names has the focus."""
    for _ in range(limit):
        if page.evaluate("(s) => document.activeElement.matches(s)", selector):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {selector}")


def test_an_approver_edits_and_approves_with_the_keyboard_only(open_as):
    run = lifecycle.start_run(
        "support_agent",
        thread_id="keys",
        input={"prompt": "Order A1001 arrived broken, please refund it"},
    )
    run_worker_in_process()
    approval = Approval.objects.get(run=run, status="PENDING")
    page = open_as("carol")
    page.goto(page.base + reverse("console:approvals"))
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.id") == f"approval-{approval.pk}"
    page.keyboard.press("e")  # into the first argument's input
    assert page.evaluate("document.activeElement.name") == "arg-order_id"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.name") == "arg-amount"
    page.keyboard.press("Control+a")
    page.keyboard.type("12.5")
    tab_to(page, f"#approval-{approval.pk} button[value=approve]")
    page.keyboard.press("Space")
    page.locator(f"#approval-{approval.pk}-diff").wait_for()
    confirm = f"#approval-{approval.pk} button[value=approve]"
    page.locator(confirm, has_text="Confirm approve").wait_for()
    tab_to(page, confirm)
    page.keyboard.press("Enter")
    page.locator(".messages", has_text="approved").wait_for()
    [approved] = Event.objects.filter(run=run, type="approval.approved")
    assert approved.payload["edited"]["to"] == {"order_id": "A1001", "amount": 12.5}


def test_an_operator_claims_and_resolves_a_takeover_with_the_keyboard_only(open_as):
    run = start_room_temperature("T-keys", budget={"model_calls": 0})
    run_worker_in_process()
    takeover = Takeover.objects.get(run=run, status="OPEN")
    page = open_as("bob")
    page.goto(page.base + reverse("console:takeovers"))
    tab_to(page, f"#takeover-{takeover.pk} form[action$='/claim/'] button")
    page.keyboard.press("Space")
    page.locator(".messages", has_text=f"You hold takeover {takeover.pk}").wait_for()
    assert Takeover.objects.get(pk=takeover.pk).claimed_by is not None

    tab_to(page, f"#t{takeover.pk}-cancel-reason")
    page.keyboard.type("not worth a bigger budget")
    page.keyboard.press("Enter")  # submits the card's cancel form
    page.locator(".messages", has_text=re.compile("cancel", re.I)).wait_for()
    takeover.refresh_from_db()
    assert takeover.status == "RESOLVED" and takeover.resolution == "cancel"


def test_every_console_page_is_reachable_by_tab_with_the_focus_visible(open_as, demo):
    page = open_as("bob")
    pages = {
        "overview": reverse("console:overview"),
        "triage": reverse("console:triage"),
        "runs": reverse("console:runs"),
        "run": reverse("console:run", args=[demo["retries_exhausted"].pk]),
        "unknowns": reverse("console:unknowns"),
        "approvals": reverse("console:approvals"),
        "takeovers": reverse("console:takeovers"),
        "workers": reverse("console:workers"),
        "audit": reverse("console:audit"),
        "schedules": reverse("console:schedules"),
        "tokens": reverse("apitokens:tokens"),
    }
    missed, unmarked = {}, {}
    for name, url in pages.items():
        assert page.goto(page.base + url).status == 200, url
        not_reached, no_mark = tab_through(page)
        if not_reached:
            missed[name] = not_reached[:5]
        if no_mark:
            unmarked[name] = no_mark[:5]
    assert missed == {}, missed
    assert unmarked == {}, unmarked
