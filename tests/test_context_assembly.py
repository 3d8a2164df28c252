"""Context assembly on a long thread: stored summary + recent messages in full + this
run's tool results, with an exact seam, also after a crash while summarising."""

import pytest

from tests.data_safety_support import context, shell_json, start, status
from tests.support.services import BACKENDS

SEED = """
from runs.models import Message, Thread
t = Thread.objects.create(thread_id="long")
Message.objects.bulk_create([
    Message(thread=t, seq=i, message_id=f"seed_{i}", role="user" if i % 2 else "assistant",
            content=f"Message {i} about the garden. It has more detail after the first sentence.")
    for i in range(1, 500)])
Thread.objects.filter(pk=t.pk).update(message_seq=499)
print(499)
"""

SUMMARIES = """
import json
from runs.models import Summary
print(json.dumps([[s.first_seq, s.last_seq, s.step.attempt]
                  for s in Summary.objects.order_by("pk")]))
"""


def assert_exact_seam(doc: dict, *, tool_results: bool) -> None:
    labels = [p["label"] for p in doc["parts"]]
    assert labels == ["system", "summary", "messages", "tool_results"]
    parts = {p["label"]: p for p in doc["parts"]}
    assert parts["summary"]["covers"] == [1, 480]
    assert parts["summary"]["content"]
    history = [m["seq"] for m in parts["messages"]["messages"]]
    assert history == list(range(481, 501))
    assert parts["messages"]["messages"][-1]["content"] == "How warm is the living room?"
    covered = list(range(parts["summary"]["covers"][0], parts["summary"]["covers"][1] + 1))
    seqs = covered + history + [m["seq"] for m in parts["tool_results"]["messages"]]
    assert len(seqs) == len(set(seqs)), "a message appears twice"
    assert seqs == list(range(1, len(seqs) + 1)), "a message is missing at a seam"
    results = parts["tool_results"]["messages"]
    if not tool_results:
        assert results == []
        return
    call, result = results
    assert call["role"] == "assistant" and call["tool_calls"][0]["name"] == "thermostat.read"
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    # The flattened input: system, summary, 20 messages, call, result, nothing else.
    assert len(doc["model_input"]) == 1 + 1 + 20 + 2
    assert doc["model_input"][1]["content"].startswith("Summary of messages 1..480:")


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_assembles_summary_recent_messages_and_tool_results_after_a_crash_while_summarising(
        deployment_factory, backend):
    deployment = deployment_factory(backend, extra_env={"AGENTOPS_LEASE_SECONDS": 2})
    shell_json(deployment, SEED)
    run_id = start(deployment, "chat", "long", {"message": "How warm is the living room?"},
                   "--crash-at", "summary_ready")

    crashed = deployment.manage("worker", "--burst", "--mode", "db", timeout=120)
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr
    assert "CRASH at summary_ready" in crashed.stdout
    assert shell_json(deployment, SUMMARIES) == []
    # Before any summary exists the whole history is there in full, still exact.
    before = context(deployment, run_id, "plan")
    assert [p["label"] for p in before["parts"]] == ["system", "messages", "tool_results"]
    assert [m["seq"] for m in before["parts"][1]["messages"]] == list(range(1, 501))

    deployment.manage("runs", "resume", run_id, "--wait", "30", check=True)
    deployment.manage("worker", "--burst", "--mode", "db", check=True, timeout=120)
    assert status(deployment, run_id)["status"] == "SUCCEEDED"
    # One summary, made by the second attempt of the summarising step.
    assert shell_json(deployment, SUMMARIES) == [[1, 480, 2]]

    assert_exact_seam(context(deployment, run_id, "plan"), tool_results=False)
    assert_exact_seam(context(deployment, run_id, "reply"), tool_results=True)

    text = deployment.manage("runs", "context", run_id, "--step", "reply", check=True).stdout
    assert "[summary covering 1..480]" in text
    assert "[messages 481..500]" in text
    assert "[tool results (this run) 501..502]" in text
