"""Model providers: the settings that choose them (checked at start-up), the retry
policy's Retry-After, the run page's usage, and an engine workflow's ``call_model`` and
``stream_model`` through the real ``openai`` client against a loopback server."""

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.urls import reverse

from agentops.authoring import RetryPolicy
from lab.workflows.synthetic import WAIT_STEPS
from runs.models import Run
from tests.support.deployment_runs import (
    burst_until,
    db_rows,
    events,
    run_status,
    shell_json,
    start,
    status,
)
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_in_process, start_room_temperature
from tests.support.openai_server import COMPLETION_TOKENS, PROMPT_TOKENS, ModelServer, conversation
from tests.support.waiting import wait_until

MANAGE = Path(__file__).resolve().parent.parent / "manage.py"


def check(**env) -> subprocess.CompletedProcess:
    """``manage.py check`` with ``env`` added to a clean model configuration."""
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGENTOPS_MODEL"))}
    full.update(env)
    return subprocess.run(
        [sys.executable, str(MANAGE), "check"],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"AGENTOPS_MODEL": "nosuch:model"}, "AGENTOPS_MODEL='nosuch:model'"),
        ({"AGENTOPS_MODEL": "openai:gpt-4.1-mini"}, "OPENAI_API_KEY"),
        ({"AGENTOPS_MODEL_PRICES": '{"openai:x": {"input": "a"}}'}, "AGENTOPS_MODEL_PRICES"),
        ({"AGENTOPS_MODEL_PRICES": "[1]"}, "AGENTOPS_MODEL_PRICES"),
    ],
)
def test_it_stops_start_up_naming_the_setting(env, named):
    proc = check(**env)
    assert proc.returncode != 0
    assert named in proc.stderr


def test_a_provider_registers_once_by_name_and_the_lab_gives_the_default():
    from django.core.exceptions import ImproperlyConfigured

    from lab.sim.provider import SimProvider
    from runs.engine.effects import model_providers

    with pytest.raises(ValueError, match="'sim' registered twice"):
        model_providers.register_provider("sim", lambda name, setting: SimProvider())
    # A bare name is a provider's own: Pydantic AI's fallback does not take it.
    with pytest.raises(ImproperlyConfigured, match="unknown model provider 'nosuch'"):
        model_providers.get_provider("nosuch", "AGENTOPS_MODEL")
    assert model_providers.default_model() == "sim"
    assert isinstance(model_providers.get_provider("sim"), SimProvider)


def test_it_starts_with_a_key_from_a_file(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    proc = check(AGENTOPS_MODEL="openai:gpt-4.1-mini", OPENAI_API_KEY_FILE=str(key))
    assert proc.returncode == 0, proc.stderr


def test_it_waits_at_least_retry_after_within_the_deadline():
    policy = RetryPolicy(max_attempts=5, initial_delay=1, max_delay=1, jitter=0, deadline=30)
    assert policy.decide(1, "RATE_LIMITED", 0, retry_after=2).delay == 2
    assert policy.decide(1, "RATE_LIMITED", 0, retry_after=0.5).delay == 1
    # Capped by the deadline: the retry comes at the deadline, not after it.
    assert policy.decide(1, "RATE_LIMITED", 25, retry_after=60).delay == 5
    assert not policy.decide(1, "MODEL_AUTH", 0).retry
    assert not policy.decide(1, "MODEL_REQUEST_INVALID", 0).retry


@pytest.mark.django_db
def test_it_shows_tokens_and_an_unknown_cost_on_the_run_page(clients):
    run = start_room_temperature("T-usage")
    Run.objects.filter(pk=run.pk).update(
        model_calls=2, tokens=1234, cost_usd="0.001", unpriced_model_calls=1
    )
    page = clients["alice"].get(reverse("console:run", args=[run.pk])).content.decode()
    assert "tokens: 1234 used" in page
    assert "cost_usd: unknown (0.001000 priced + 1 model calls without a price)" in page


def thermostat_brain(body: dict) -> dict:
    """room_temperature over the OpenAI wire: read the thermostat, then answer."""
    _, results = conversation(body)
    if not results and body.get("tools"):
        return {"tool_calls": [{"name": "thermostat_read", "arguments": {"room": "living room"}}]}
    if results:
        return {"content": f"It is {results[-1][1]['celsius']} degrees in the living room."}
    return {"content": "No reading yet."}


def test_it_runs_an_engine_workflow_through_the_openai_client(deployment_factory):
    with ModelServer(thermostat_brain) as server:
        d = deployment_factory(
            "sqlite",
            extra_env={
                "AGENTOPS_MODEL": "openai:test-model",
                "OPENAI_BASE_URL": server.base_url,
                "OPENAI_API_KEY": "test-key",
            },
        )
        run_id = start(d, "room_temperature", json.dumps({"question": "How warm is it?"}))
        burst_until(d, "SUCCEEDED", lambda: run_status(d, run_id) == "SUCCEEDED")
    assert [bool(r.get("stream")) for r in server.requests] == [False, True]
    assert server.requests[0]["tools"][0]["function"]["name"] == "thermostat_read"
    s = status(d, run_id)
    assert s["messages"][-1]["content"] == "It is 23.5 degrees in the living room."
    assert s["calls"]["thermostat.read"] == 1
    deltas = events(d, run_id, "message.delta")
    assert "".join(e["payload"]["text"] for e in deltas) == s["messages"][-1]["content"]
    assert len(deltas) > 1
    used = s["budget"]["used"]
    assert (used["model_calls"], used["tokens"]) == (2, 2 * (PROMPT_TOKENS + COMPLETION_TOKENS))
    assert used["cost_usd"] is None


def test_concurrent_model_calls_of_a_workers_slots_share_one_client(deployment_factory):
    """Twenty slots ask the model at once (each answer is held until all twenty have
    arrived), then again for two more steps each: one shared client keeps its twenty
    connections for all sixty requests, where a client per call opens one per request."""
    slots, runs = 20, 20
    everyone_asked = threading.Event()

    def answer(body: dict) -> dict:
        if server.count >= slots:
            everyone_asked.set()
        return {"content": "ok", "hold": everyone_asked}

    with ModelServer(answer, keep_alive=True) as server:
        d = deployment_factory(
            "postgres",
            {
                "AGENTOPS_MODEL": "openai:test-model",
                "OPENAI_BASE_URL": server.base_url,
                "OPENAI_API_KEY": "test-key",
            },
        )
        shell_json(
            d,
            f"""
from runs.engine.control.lifecycle import start_run
for i in range({runs}):
    start_run("bench_agent", thread_id=f"shared-{{i}}", input={{}}, actor="test")
print(json.dumps(None))
""",
        )
        worker = d.popen("worker", "--mode", "db", "--concurrency", slots)
        try:
            wait_until(
                lambda: {r[0] for r in db_rows(d, "SELECT status FROM runs_run")} == {"SUCCEEDED"},
                timeout=180,
                what="every run to succeed",
            )
        finally:
            worker.kill()
            worker.wait(30)
        assert everyone_asked.is_set()
        assert server.count == runs * WAIT_STEPS
        assert server.connections <= slots


def test_a_worker_warms_its_model_before_the_first_step_and_never_fails_on_it(settings, caplog):
    """``warm`` (called by a worker before its first claim) builds the shared client and
    model of an ``openai:`` model, sending nothing; a name that cannot be made is a
    warning, not an error (each step that asks reports it), and ``sim`` has nothing to
    warm."""
    from runs.agents import providers
    from runs.engine.effects import model_providers

    settings.OPENAI_API_KEY = "test-key"
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    assert model_providers.warm("openai:warm-test")
    client = providers.openai_client(settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY)
    assert providers._models[(id(client), "warm-test")].client is client
    assert not model_providers.warm("nosuch:model")
    assert "could not prepare model nosuch:model" in caplog.text
    assert not model_providers.warm("sim")


@pytest.mark.django_db(transaction=True)
def test_a_worker_of_the_default_install_warms_the_resolved_default_model(settings, caplog):
    """With ``AGENTOPS_MODEL`` empty (the default install) a worker prepares the default
    model an installed app registers (the lab's ``sim``), not the empty name; with it
    set, that model (here an ``openai:`` one: its shared client is built)."""
    from runs.agents import providers
    from runs.engine.effects import model_providers

    settings.AGENTOPS_MODEL = ""
    model_providers._providers.clear()
    run_worker_in_process()
    assert "sim" in model_providers._providers
    assert "could not prepare model" not in caplog.text

    settings.AGENTOPS_MODEL = "openai:warm-default"
    settings.OPENAI_API_KEY = "test-key"
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    run_worker_in_process()
    client = providers.openai_client(settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY)
    assert (id(client), "warm-default") in providers._models
    assert "could not prepare model" not in caplog.text
