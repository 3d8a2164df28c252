"""The Content-Security-Policy and the other browser security headers on every console
and admin page, and, in a real headless Chromium, that htmx keeps working under the
policy while an injected inline script or event handler does not run."""

import pytest
from django.test import Client
from django.urls import reverse

from runs.models import Artifact
from tests.support.browser import *  # noqa: F403 - fixtures (browser, open_as)
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import start_room_temperature
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

PAGES = [
    "console:overview",
    "console:triage",
    "console:runs",
    "console:unknowns",
    "console:approvals",
    "console:takeovers",
    "console:workers",
    "console:audit",
    "apitokens:tokens",
    "admin:index",
    "admin:runs_run_changelist",
]

#: Collects every CSP violation the page reports, for the test to read back.
WATCH_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__violations.push(e.violatedDirective + " " + (e.blockedURI || "inline"));
});
"""


def directives(header: str) -> dict[str, str]:
    parts = (p.strip().split(" ", 1) for p in header.split(";") if p.strip())
    return {p[0]: (p[1] if len(p) > 1 else "") for p in parts}


def test_it_sends_a_strict_policy_and_the_security_headers_on_every_page(clients, demo):
    run = demo["succeeded"]
    pages = [reverse(name) for name in PAGES] + [
        reverse("console:run", args=[run.pk]),
        reverse("admin:runs_run_change", args=[run.pk]),
    ]
    bob = clients["bob"]  # the operator is staff: the admin too
    for url in pages + [reverse("login")]:
        response = (bob if url != reverse("login") else Client()).get(url)
        assert response.status_code == 200, url
        policy = directives(response.headers["Content-Security-Policy"])
        assert policy["script-src"] == "'self'", url
        assert policy["style-src"] == "'self'", url
        assert policy["default-src"] == "'self'" and policy["object-src"] == "'none'", url
        assert policy["frame-ancestors"] == "'none'", url
        assert "unsafe-inline" not in response.headers["Content-Security-Policy"], url
        assert response.headers["X-Content-Type-Options"] == "nosniff", url
        assert response.headers["Referrer-Policy"] == "same-origin", url
        assert response.headers["X-Frame-Options"] == "DENY", url
        body = response.content.decode()
        assert "<script>" not in body and " onclick=" not in body, url


def test_it_serves_artifacts_as_sandboxed_attachments(clients, demo):
    artifact = Artifact.objects.filter(size__gt=0).first()
    response = clients["alice"].get(reverse("console:artifact", args=[artifact.pk]))
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/octet-stream"
    assert response.headers["Content-Disposition"].startswith("attachment;")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert directives(response.headers["Content-Security-Policy"]).keys() >= {
        "default-src",
        "sandbox",
    }


def test_htmx_works_under_the_policy_and_injected_scripts_do_not_run(open_as, actors):
    start_room_temperature("T-csp-1")
    start_room_temperature("T-csp-2")
    page = open_as("bob")
    page.add_init_script(WATCH_VIOLATIONS)
    page.goto(page.base + reverse("console:runs"))
    assert page.locator("#runs-table tbody tr").count() == 2
    # htmx: typing a filter swaps the table in place (an hx-get with HX-Request).
    with page.expect_request(lambda r: r.headers.get("hx-request") == "true") as request:
        page.fill("#run-filters input[name=thread]", "T-csp-2")
        page.dispatch_event("#run-filters input[name=thread]", "change")
    assert "thread=T-csp-2" in request.value.url
    # (Playwright's wait_for_function evaluates strings, which the policy forbids.)
    page.locator("#runs-table tbody tr").nth(1).wait_for(state="detached")
    assert "T-csp-2" in page.locator("#runs-table").inner_text()
    # htmx did not inject its indicator <style> (the policy would refuse it): the rules
    # come from the stylesheet.
    assert page.evaluate("document.querySelectorAll('head style').length") == 0
    assert page.evaluate("window.__violations") == []
    # An escaping mistake that lets markup through: neither an inline script nor an
    # inline event handler runs, and the browser reports both as violations.
    page.evaluate(
        """() => {
        const s = document.createElement("script");
        s.textContent = "window.__pwned = 'script'";
        document.body.appendChild(s);
        document.body.insertAdjacentHTML(
          "beforeend", "<img src='data:,' onerror=\\"window.__pwned = 'handler'\\">");
        document.body.insertAdjacentHTML(
          "beforeend", "<a id='x' href=\\"javascript:window.__pwned='link'\\">x</a>");
        document.getElementById("x").click();
    }"""
    )
    # Polled with evaluate: wait_for_function evaluates a string, which the policy forbids.
    violations = wait_until(
        lambda: (v := page.evaluate("window.__violations")) and len(v) >= 3 and v,
        what="three CSP violations reported",
        timeout=10,
        interval=0.05,
    )
    assert page.evaluate("window.__pwned") is None
    assert all(v.startswith("script-src") for v in violations), violations


@pytest.mark.parametrize("name", ["admin:index", "admin:runs_run_changelist"])
def test_admin_pages_load_without_violations(open_as, name):
    page = open_as("bob")
    page.add_init_script(WATCH_VIOLATIONS)
    response = page.goto(page.base + reverse(name))
    assert response.status == 200
    page.wait_for_load_state("load")
    assert page.evaluate("window.__violations") == []
