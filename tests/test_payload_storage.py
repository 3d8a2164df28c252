"""Storage growth: a tool output kept by the ledger, the step and the checkpoint is stored
once. Two loops of 20 turns with 64 KiB tool outputs may grow the stored rows by at most
1.5x the unique payload bytes (byte counts of the rows, not timings)."""

import json

import pytest
from django.db.models import Sum, TextField
from django.db.models.functions import Cast, Length
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from runs.engine.control.lifecycle import start_run
from runs.engine.data import payloads
from runs.models import Checkpoint, Event, Message, Operation, Payload, Run, Step
from runs.payload_field import INLINE_LIMIT
from runs.storage_stats import storage_by_workflow
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_in_process
from tests.support.storage_loop import OUTPUT_BYTES, TURNS, fetch

pytestmark = pytest.mark.django_db(transaction=True)


def stored_bytes(model, field: str, **filters) -> int:
    """Bytes of ``field`` as the database holds it, summed over the matching rows."""
    total = model.objects.filter(**filters).aggregate(
        n=Sum(Length(Cast(field, output_field=TextField())))
    )["n"]
    return total or 0


def run_bytes(run_ids) -> dict[str, int]:
    return {
        "step outputs": stored_bytes(Step, "output", run_id__in=run_ids),
        "checkpoints": stored_bytes(Checkpoint, "data", run_id__in=run_ids),
        "ledger results": stored_bytes(Operation, "result", run_id__in=run_ids),
        "ledger arguments": stored_bytes(Operation, "arguments", run_id__in=run_ids),
        "events": stored_bytes(Event, "payload", run_id__in=run_ids),
        "messages": stored_bytes(Message, "content", run_id__in=run_ids),
        "payloads": stored_bytes(Payload, "text", run_id__in=run_ids),
    }


def test_two_loops_of_20_turns_store_each_output_once(loop_workflow):
    runs = [
        start_run("storage_loop", thread_id=f"loop-{i}", input={}, actor="test") for i in range(2)
    ]
    run_worker_in_process()
    ids = [r.pk for r in runs]
    assert set(Run.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"SUCCEEDED"}
    unique = 2 * TURNS * OUTPUT_BYTES
    sizes = run_bytes(ids)
    total = sum(sizes.values())
    assert total <= 1.5 * unique, (total / unique, sizes)
    # Each output is stored exactly once, and read back whole from every place.
    assert Payload.objects.filter(run_id__in=ids).count() == 2 * TURNS
    assert payloads.stored_bytes(ids) == unique
    last = Step.objects.filter(run=runs[0]).order_by("-seq").first()
    assert last.output["n"] == TURNS and len(last.output["text"]) == OUTPUT_BYTES
    assert (
        last.output["text"] == fetch({"turn": TURNS}, type("C", (), {"run_id": runs[0].pk}))["text"]
    )
    op = Operation.objects.get(run=runs[0], idempotency_key__contains="fetch-3")
    assert len(op.result["text"]) == OUTPUT_BYTES
    cp = Checkpoint.objects.filter(run=runs[0]).order_by("-pk").first()
    assert cp.state["outputs"]["turn"]["text"] == last.output["text"]


def test_it_keeps_small_values_inline_and_marker_lookalikes_verbatim(loop_workflow):
    run = start_run("storage_loop", thread_id="x", input={}, actor="test")
    value = {
        "small": "a" * INLINE_LIMIT,
        "$payload": "0" * 64,
        "bytes": 5,
        "nested": [{"$literal": {"x": 1}}, "b" * (INLINE_LIMIT + 1)],
    }
    stored = payloads.externalize(run.pk, value)
    assert stored["$literal"]["small"] == value["small"]
    Step.objects.filter(run=run).update(output=stored)
    assert Step.objects.get(run=run).output == value
    assert Payload.objects.filter(run=run).count() == 1


def test_the_run_page_cuts_large_outputs_and_links_to_the_full_value(loop_workflow, clients):
    run = start_run("storage_loop", thread_id="page", input={}, actor="test")
    run_worker_in_process()
    page = clients["alice"].get(reverse("console:run", args=[run.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    # 20 outputs of 64 KiB (1.3 MB) are on the page only as cut previews.
    assert len(html) < 4 * OUTPUT_BYTES, len(html)
    op = Operation.objects.get(run=run, idempotency_key__contains="fetch-7")
    url = reverse("console:value", args=[run.pk, "operation-result", op.pk])
    assert f'href="{url}"' in html
    full = clients["alice"].get(url)
    assert full.status_code == 200 and full.headers["Content-Type"].startswith("text/plain")
    assert json.loads(full.content)["text"] == op.result["text"]
    assert clients["dave"].get(url).status_code == 403
    other = start_run("storage_loop", thread_id="other", input={}, actor="test")
    assert (
        clients["alice"]
        .get(reverse("console:value", args=[other.pk, "operation-result", op.pk]))
        .status_code
        == 404
    )


def test_the_overview_and_metrics_show_storage_per_workflow(loop_workflow, clients, settings):
    run = start_run("storage_loop", thread_id="stats", input={}, actor="test")
    run_worker_in_process()
    [row] = [r for r in storage_by_workflow(use_cache=False) if r["workflow"] == "storage_loop"]
    assert row["payload_bytes"] == TURNS * OUTPUT_BYTES
    assert row["payload_bytes"] <= row["db_bytes"] <= 1.5 * row["payload_bytes"]
    assert row["db_bytes"] == sum(run_bytes([run.pk]).values()) + stored_bytes(
        Run, "input", pk=run.pk
    ) + stored_bytes(Step, "input", run_id=run.pk)
    page = clients["alice"].get(reverse("console:overview")).content.decode()
    panel_url = reverse("console:overview_storage")
    assert "Storage per workflow" in page and f'hx-get="{panel_url}"' in page
    panel = clients["alice"].get(panel_url, HTTP_HX_REQUEST="true").content.decode()
    assert f"<td>storage_loop</td><td>{filesizeformat(row['db_bytes'])}</td>" in panel
    settings.AGENTOPS_METRICS_TOKEN = "scrape-me"
    metrics = clients["alice"].get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me")
    samples = {
        (sample.name, sample.labels.get("workflow")): sample.value
        for family in text_string_to_metric_families(metrics.content.decode())
        for sample in family.samples
    }
    assert samples[("agentops_storage_payload_bytes", "storage_loop")] == TURNS * OUTPUT_BYTES
    assert samples[("agentops_storage_db_bytes", "storage_loop")] == row["db_bytes"]
