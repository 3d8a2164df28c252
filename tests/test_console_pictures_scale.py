"""The pictures on a large database (100,000 runs, PostgreSQL): the overview, the
workers page and a run page render within the web process's time budget, which
PostgreSQL enforces (``statement_timeout`` of the ``web`` process kind, tightened here to
2 s a statement), with the same number of queries as on an empty database."""

import contextlib
import time
from collections.abc import Iterator

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agentops.db_session import process_kind, use_process_kind
from lab.drills.bench import seed_console
from runs.console.charts import overview_charts
from runs.engine.state.clock import db_now
from runs.models import Run
from tests.support.in_process import *  # noqa: F403 - fixtures

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

#: The time budget of one statement of a console page, in seconds (PostgreSQL enforces it).
STATEMENT_BUDGET_S = 2


@pytest.fixture
def web_budget(settings):
    """``enter()`` makes this process a web one with the tight statement budget."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (make test)")
    settings.AGENTOPS_DB_TIMEOUTS = {
        **settings.AGENTOPS_DB_TIMEOUTS,
        "web": (1, STATEMENT_BUDGET_S),
    }
    before = process_kind()
    yield lambda: use_process_kind("web")
    use_process_kind(before)


@contextlib.contextmanager
def references_unchecked() -> Iterator[None]:
    """Run the block with PostgreSQL's per-row foreign key triggers off on this
    connection (``session_replication_role``; the ``make test`` server's user is a
    superuser). The seed builds every reference from the rows it points to, and checking
    1.3 million of them one row at a time costs a large part of its time."""
    with connection.cursor() as cur:
        cur.execute("SET session_replication_role = replica")
    try:
        yield
    finally:
        with connection.cursor() as cur:
            cur.execute("SET session_replication_role = DEFAULT")


def test_the_pictures_render_for_100k_runs_within_the_budget(clients, web_budget):
    def visit(url):
        # The storage figures are cached for a minute: every visit pays for them,
        # so the count does not depend on when the cache last expired.
        cache.clear()
        began = time.monotonic()
        with CaptureQueriesContext(connection) as captured:
            response = clients["alice"].get(url)
        assert response.status_code == 200, url
        return len(captured), time.monotonic() - began, response.content.decode()

    pages = [reverse("console:overview"), reverse("console:workers")]
    empty = [visit(url)[0] for url in pages]
    with references_unchecked():
        seeded = seed_console(100_000, 10, lambda line: None)
    assert seeded["runs"] == Run.objects.count() == 100_000
    run = Run.objects.order_by("-created_at").first()
    web_budget()
    for url, queries_when_empty in zip(pages, empty, strict=True):
        queries, seconds, page = visit(url)
        assert queries == queries_when_empty, url
        assert "<svg" in page and "The numbers as a table" in page
        print(f"{url}: {queries} queries, {seconds * 1000:.0f} ms with 100k runs")
    queries, seconds, page = visit(reverse("console:run", args=[run.pk]))
    assert 'id="chart-run-timeline"' in page
    print(f"run page: {queries} queries, {seconds * 1000:.0f} ms")
    began = time.monotonic()
    charts = overview_charts(db_now())
    print(f"overview pictures alone: {(time.monotonic() - began) * 1000:.0f} ms")
    # One run every 30 s: the last 6 hours hold about 720 runs' step events.
    assert sum(int(row[1]) for row in charts[0].table.rows) > 0
