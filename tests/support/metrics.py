"""Scraping ``/metrics`` in tests: the token, a fixture that turns the endpoint on, and
the samples of one scrape."""

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

TOKEN = "metrics-secret"


@pytest.fixture
def metrics_on(settings, tmp_path):
    """``/metrics`` answers to ``TOKEN``; the simulated devices live under ``tmp_path``."""
    settings.AGENTOPS_METRICS_TOKEN = TOKEN
    settings.AGENTOPS_DEVICE_DIR = tmp_path / "devices"


def scrape() -> dict[tuple[str, tuple], float]:
    """One scrape with ``TOKEN``: ``{(sample name, sorted label pairs): value}``; fails the
    test unless the answer is 200 in the Prometheus text format."""
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples
