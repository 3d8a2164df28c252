"""Context assembly on a long thread: stored summary + recent messages in full + this
run's tool results, with an exact seam, also after a crash while summarising."""

import pytest

from tests.support.deployment_runs import run_context, shell_json, start_on_thread, status
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
    deployment_factory, backend
):
    deployment = deployment_factory(backend, extra_env={"AGENTOPS_LEASE_SECONDS": 2})
    shell_json(deployment, SEED)
    run_id = start_on_thread(
        deployment,
        "chat",
        "long",
        {"message": "How warm is the living room?"},
        "--crash-at",
        "summary_ready",
    )

    crashed = deployment.manage("worker", "--burst", "--mode", "db", timeout=120)
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr
    assert "CRASH at summary_ready" in crashed.stdout
    assert shell_json(deployment, SUMMARIES) == []
    # Before any summary exists the whole history is there in full, still exact.
    before = run_context(deployment, run_id, "plan")
    assert [p["label"] for p in before["parts"]] == ["system", "messages", "tool_results"]
    assert [m["seq"] for m in before["parts"][1]["messages"]] == list(range(1, 501))

    deployment.manage("runs", "resume", run_id, "--wait", "30", check=True)
    deployment.manage("worker", "--burst", "--mode", "db", check=True, timeout=120)
    assert status(deployment, run_id)["status"] == "SUCCEEDED"
    # One summary, made by the second attempt of the summarising step.
    assert shell_json(deployment, SUMMARIES) == [[1, 480, 2]]

    assert_exact_seam(run_context(deployment, run_id, "plan"), tool_results=False)
    assert_exact_seam(run_context(deployment, run_id, "reply"), tool_results=True)

    text = deployment.manage("runs", "context", run_id, "--step", "reply", check=True).stdout
    assert "[summary covering 1..480]" in text
    assert "[messages 481..500]" in text
    assert "[tool results (this run) 501..502]" in text


def _thread_with_messages(count: int, words: int = 5):
    from runs.models import Message, Thread

    thread = Thread.objects.create(thread_id=f"t{count}-{words}")
    Message.objects.bulk_create(
        [
            Message(
                thread=thread,
                seq=i,
                message_id=f"m{thread.pk}_{i}",
                role="user",
                content=" ".join(["word"] * words),
            )
            for i in range(1, count + 1)
        ]
    )
    Thread.objects.filter(pk=thread.pk).update(message_seq=count)
    return thread


def _run_on(thread, end: int):
    from runs.models import Checkpoint, Run

    run = Run.objects.create(
        thread=thread, workflow="chat", workflow_version=1, input={"message": "x"}
    )
    Checkpoint.objects.create(run=run, name="start", state={"message_seq": end})
    return run


@pytest.mark.django_db
def test_a_later_run_made_in_the_same_instant_is_still_not_earlier():
    from django.db.models.functions import Now

    from runs.engine.data.model_input import assemble_context
    from runs.models import Run, Summary

    thread = _thread_with_messages(50)
    earlier = _run_on(thread, 40)
    later = _run_on(thread, 50)
    # One statement: both rows get the very same database-made time.
    Run.objects.filter(pk__in=[earlier.pk, later.pk]).update(created_at=Now())
    earlier.refresh_from_db()
    Summary.objects.create(thread=thread, run=earlier, first_seq=1, last_seq=20, content="a")
    Summary.objects.create(thread=thread, run=later, first_seq=1, last_seq=30, content="b")
    assert assemble_context(earlier).part("summary")["covers"] == [1, 20]


@pytest.mark.django_db
def test_it_counts_tokens_with_the_configured_counter(settings):
    from runs.engine.data import model_input

    thread = _thread_with_messages(30)
    run = _run_on(thread, 30)
    settings.AGENTOPS_CONTEXT_SUMMARY_TOKENS = 1000
    settings.AGENTOPS_CONTEXT_RECENT_MESSAGES = 10
    assert model_input.summary_due(run) is None  # 30 x 5 words = 150 tokens
    settings.AGENTOPS_TOKEN_COUNTER = "tests.test_context_assembly.hundred_per_text"
    plan = model_input.summary_due(run)
    assert plan.last_seq == 20 and [m["seq"] for m in plan.new_messages] == list(range(1, 21))
    assert plan.covered_tokens == 20 * 100


def hundred_per_text(text: str) -> int:
    """A test token counter: every text counts 100 tokens."""
    return 100


@pytest.mark.django_db
def test_it_never_lets_a_later_runs_summary_change_an_earlier_runs_input():
    from runs.engine.data.model_input import assemble_context
    from runs.models import Summary

    thread = _thread_with_messages(50)
    earlier = _run_on(thread, 40)
    later = _run_on(thread, 50)
    Summary.objects.create(thread=thread, run=earlier, first_seq=1, last_seq=20, content="a")
    Summary.objects.create(thread=thread, run=later, first_seq=1, last_seq=30, content="b")
    first = assemble_context(earlier)
    assert first.part("summary")["covers"] == [1, 20]
    assert first.seqs == list(range(1, 41))
    second = assemble_context(later)
    assert second.part("summary")["covers"] == [1, 30]
    assert second.seqs == list(range(1, 51))
