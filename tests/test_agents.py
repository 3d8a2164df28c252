"""Pydantic AI agents as durable workflows against an OpenAI-compatible server on
loopback (tests/support/openai_server.py), driven through the real ``openai`` client by
real worker subprocesses. Only the model is faked; it counts every request it gets."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from lab.workflows.support_agent import next_action
from tests.support.agents import deployment
from tests.support.deployment_runs import (
    approval_id,
    burst_until,
    db_rows,
    events,
    make_user,
    run_status,
    start,
    status,
)
from tests.support.openai_server import COMPLETION_TOKENS, PROMPT_TOKENS, ModelServer, conversation
from tests.support.services import BACKENDS, Deployment

PROMPT = json.dumps({"prompt": "Order A1001 arrived broken, please refund it"})


def support_brain(body: dict) -> dict:
    """The scripted support agent over the OpenAI wire format."""
    prompt, results = conversation(body)
    action = next_action(prompt, results)
    if "call" in action:
        return {"tool_calls": [{"name": action["call"], "arguments": action["arguments"]}]}
    return {"content": action["text"]}


def refunds(d: Deployment) -> list[dict]:
    path = Path(d.env["AGENTOPS_DEVICE_DIR"]) / "shop.json"
    if not path.exists():
        return []
    return json.loads(path.read_text())["state"]["refunds"]


def waiting(d: Deployment, run_id: str) -> None:
    burst_until(d, "WAITING_APPROVAL", lambda: run_status(d, run_id) == "WAITING_APPROVAL")


def decide(d: Deployment, run_id: str, *args: str):
    return d.manage("approvals", "decide", approval_id(d, run_id), *args, "--as", "ann")


@pytest.fixture
def server():
    with ModelServer(support_brain) as s:
        yield s


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_runs_the_example_agent_end_to_end_with_usage_and_cost(
    deployment_factory, server, backend
):
    d = deployment(deployment_factory, server, backend)
    make_user(d, "ann", approver=True)
    run_id = start(d, "support_agent", PROMPT)
    waiting(d, run_id)
    # Waiting for a human holds no lease and no worker.
    assert db_rows(d, "SELECT owner, lease_until FROM runs_step WHERE name = 'approve'") == [
        ("", None)
    ]
    assert decide(d, run_id, "approve").returncode == 0
    burst_until(d, "SUCCEEDED", lambda: run_status(d, run_id) == "SUCCEEDED")

    s = status(d, run_id)
    roles = [(m["role"], [c["name"] for c in m["tool_calls"]]) for m in s["messages"]]
    assert roles == [
        ("user", []),
        ("assistant", ["lookup_order"]),
        ("tool", []),
        ("assistant", ["issue_refund"]),
        ("tool", []),
        ("assistant", []),
    ]
    assert s["messages"][-1]["content"] == "I refunded 42.00 USD for order A1001 (refund R1)."
    assert server.count == 3
    used = s["budget"]["used"]
    assert used["model_calls"] == 3
    assert used["tokens"] == 3 * (PROMPT_TOKENS + COMPLETION_TOKENS)
    # 3 x (11 input tokens at 1 USD + 7 output at 2 USD per million tokens).
    assert used["cost_usd"] == "0.000075"
    assert [r["amount"] for r in refunds(d)] == ["42.00"]
    page_tokens = db_rows(d, "SELECT tokens FROM runs_run")[0][0]
    assert page_tokens == used["tokens"]


def test_it_shows_the_cost_as_unknown_without_a_price(deployment_factory, server):
    d = deployment(deployment_factory, server, AGENTOPS_MODEL_PRICES="{}")
    run_id = start(d, "support_agent", PROMPT)
    waiting(d, run_id)
    used = status(d, run_id)["budget"]["used"]
    assert (used["model_calls"], used["cost_usd"], used["unpriced_model_calls"]) == (2, None, 2)
    assert "cost unknown" in d.manage("runs", "status", run_id, check=True).stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_replays_the_recorded_response_after_a_crash(deployment_factory, server, backend):
    d = deployment(deployment_factory, server, backend)
    run_id = start(d, "support_agent", PROMPT, "--crash-after-model", "1")
    first = d.manage("worker", "--burst", timeout=120)
    assert first.returncode == 75, first.stdout + first.stderr
    assert server.count == 1

    waiting(d, run_id)
    # An uncrashed run asks twice before the approval (lookup, then refund): so did this.
    assert server.count == 2
    calls = [c for m in status(d, run_id)["messages"] for c in m["tool_calls"]]
    assert [c["id"] for c in calls] == ["call_0_0", "call_1_0"]
    assert status(d, run_id)["budget"]["used"]["model_calls"] == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_verifies_an_interrupted_refund_and_refunds_once(deployment_factory, server, backend):
    d = deployment(deployment_factory, server, backend)
    make_user(d, "ann", approver=True)
    run_id = start(d, "support_agent", PROMPT, "--crash-after-tool", "issue_refund")
    waiting(d, run_id)
    assert decide(d, run_id, "approve").returncode == 0
    crashed = d.manage("worker", "--burst", timeout=120)
    assert crashed.returncode == 75, crashed.stdout + crashed.stderr
    assert len(refunds(d)) == 1

    burst_until(d, "SUCCEEDED", lambda: run_status(d, run_id) == "SUCCEEDED")
    assert [e["payload"]["answer"] for e in events(d, run_id, "operation.verified")] == ["done"]
    assert len(refunds(d)) == 1
    assert server.count == 3


def test_it_refunds_the_edited_amount_and_records_both(deployment_factory, server):
    d = deployment(deployment_factory, server)
    make_user(d, "ann", approver=True)
    run_id = start(d, "support_agent", PROMPT)
    waiting(d, run_id)
    edited = decide(d, run_id, "approve", "--arguments", '{"order_id": "A1001", "amount": 30}')
    assert edited.returncode == 0, edited.stderr
    burst_until(d, "SUCCEEDED", lambda: run_status(d, run_id) == "SUCCEEDED")

    assert [r["amount"] for r in refunds(d)] == ["30.00"]
    (approved,) = events(d, run_id, "approval.approved")
    assert approved["actor"] == "user:ann"
    assert approved["payload"]["edited"] == {
        "tool": "issue_refund",
        "from": {"order_id": "A1001", "amount": 42.0},
        "to": {"order_id": "A1001", "amount": 30},
    }
    # runs status shows the arguments the tool ran with, marked as edited.
    calls = [c for m in status(d, run_id)["messages"] for c in m["tool_calls"]]
    [refund] = [c for c in calls if c["name"] == "issue_refund"]
    assert refund["edited"] == {
        "from": {"order_id": "A1001", "amount": 42.0},
        "to": {"order_id": "A1001", "amount": 30},
        "by": "user:ann",
    }
    text = d.manage("runs", "status", run_id, check=True).stdout
    assert 'issue_refund({"order_id": "A1001", "amount": 30})' in text
    assert (
        'arguments edited by user:ann; the model asked {"order_id": "A1001", "amount": 42.0}'
        in text
    )


def test_it_refuses_edited_arguments_that_fail_the_schema(deployment_factory, server):
    d = deployment(deployment_factory, server)
    make_user(d, "ann", approver=True)
    run_id = start(d, "support_agent", PROMPT)
    waiting(d, run_id)
    for amount in ('"x"', "true"):
        refused = decide(
            d, run_id, "approve", "--arguments", f'{{"order_id": "A1001", "amount": {amount}}}'
        )
        assert refused.returncode != 0
        assert "invalid_arguments" in refused.stderr, refused.stderr
        # The reason is said once, not again after the code.
        assert refused.stderr.count("arguments.amount") == 1, refused.stderr
    huge = decide(d, run_id, "approve", "--arguments", '{"order_id": "A1001", "amount": -1e308}')
    assert huge.returncode != 0 and "-1e+308 cannot be stored exactly" in huge.stderr
    assert "comes back as an integer, not this float" in huge.stderr, huge.stderr
    assert run_status(d, run_id) == "WAITING_APPROVAL"
    assert events(d, run_id, "approval.approved") == []
    assert refunds(d) == []


def test_it_gives_the_model_the_denial_on_reject(deployment_factory, server):
    d = deployment(deployment_factory, server)
    make_user(d, "ann", approver=True)
    run_id = start(d, "support_agent", PROMPT)
    waiting(d, run_id)
    assert decide(d, run_id, "reject", "--comment", "not our fault").returncode == 0
    burst_until(d, "SUCCEEDED", lambda: run_status(d, run_id) == "SUCCEEDED")

    assert refunds(d) == []
    last_request = server.requests[-1]["messages"]
    denial = [m for m in last_request if m["role"] == "tool"][-1]["content"]
    assert "rejected by ann" in denial and "not our fault" in denial
    assert status(d, run_id)["messages"][-1]["content"].startswith("I did not issue the refund")


def test_it_waits_as_long_as_retry_after_says(deployment_factory):
    answers = iter([{"status": 429, "headers": {"Retry-After": "2"}, "error": "slow down"}])

    def brain(body):
        return next(answers, None) or support_brain(body)

    with ModelServer(brain) as server:
        d = deployment(deployment_factory, server)
        run_id = start(d, "support_agent", PROMPT)
        waiting(d, run_id)
    # The request waited for the provider and went again within the step's attempt:
    # no retry counted, its one ledger row.
    assert events(d, run_id, "step.retry_scheduled") == []
    assert events(d, run_id, "model.request_retry") == []
    assert server.times[1] - server.times[0] >= 2
    assert server.count == 3


def test_a_retry_after_longer_than_a_request_waits_goes_to_the_steps_policy(deployment_factory):
    answers = iter([{"status": 429, "headers": {"Retry-After": "31"}, "error": "slow down"}])

    def brain(body):
        return next(answers, None) or support_brain(body)

    with ModelServer(brain) as server:
        d = deployment(deployment_factory, server)
        run_id = start(d, "support_agent", PROMPT)
        d.manage("worker", "--burst", check=True, timeout=120)
    # No worker waits 31 s: the step's attempt ends and its retry is scheduled that late.
    (retry,) = events(d, run_id, "step.retry_scheduled")
    assert retry["payload"]["error_code"] == "RATE_LIMITED"
    wait = datetime.fromisoformat(retry["payload"]["not_before"]) - datetime.fromisoformat(
        retry["payload"]["failed_at"]
    )
    assert wait.total_seconds() >= 31
    assert server.count == 1


def test_it_fails_at_once_on_401_without_retry(deployment_factory):
    with ModelServer(lambda body: {"status": 401, "error": "bad key"}) as server:
        d = deployment(deployment_factory, server)
        run_id = start(d, "support_agent", PROMPT)
        burst_until(d, "FAILED", lambda: run_status(d, run_id) == "FAILED")
        d.manage("worker", "--burst", check=True)
    assert server.count == 1
    s = status(d, run_id)
    assert s["error_code"] == "MODEL_AUTH"
    assert events(d, run_id, "step.retry_scheduled") == []


def test_it_takes_over_on_malformed_tool_arguments_and_the_worker_lives(deployment_factory):
    def brain(body):
        return {"tool_calls": [{"name": "lookup_order", "arguments": '{"order_id": "A10'}]}

    with ModelServer(brain) as server:
        d = deployment(deployment_factory, server)
        run_id = start(d, "support_agent", PROMPT)
        worker = d.manage("worker", "--burst", timeout=120)
    assert worker.returncode == 0, worker.stderr
    assert run_status(d, run_id) == "PAUSED"
    s = status(d, run_id)
    assert s["takeover"]["cause"] == "retries_exhausted"
    failed = db_rows(d, "SELECT error_code FROM runs_step WHERE name = 'agent'")
    assert failed == [("MODEL_RESPONSE_INVALID",)]
    assert server.count == 1


def test_it_pauses_on_the_token_budget_and_resumes_without_asking_again(deployment_factory, server):
    d = deployment(deployment_factory, server)
    tokens = PROMPT_TOKENS + COMPLETION_TOKENS
    run_id = start(d, "support_agent", PROMPT, "--budget", json.dumps({"tokens": tokens}))
    burst_until(d, "PAUSED", lambda: run_status(d, run_id) == "PAUSED")
    s = status(d, run_id)
    assert (s["takeover"]["cause"], s["budget"]["used"]["tokens"]) == ("budget_exhausted", tokens)
    assert server.count == 1  # the second request was refused before it was sent

    d.manage("runs", "budget", run_id, "--add-tokens", str(tokens), "--reason", "ok", check=True)
    waiting(d, run_id)
    # The re-executed step reused the first response: one more request, not two.
    assert server.count == 2
    assert status(d, run_id)["budget"]["used"]["tokens"] == 2 * tokens
