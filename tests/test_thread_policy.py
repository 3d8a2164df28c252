"""Messages arriving while a run is in progress: ``queue`` (wait, then start the next
run) and ``interrupt`` (cancel the current run through the cancel flow, then start);
a resent message with the same request id is stored once."""

import json

import pytest

from tests.support.deployment_runs import (
    run_context,
    shell_json,
    start_on_thread,
    status,
    step_status,
)
from tests.support.services import BACKENDS
from tests.support.waiting import wait_until

RUNS_OF = """
import json
from runs.models import Run
print(json.dumps([[str(r.pk), r.status] for r in Run.objects.filter(thread__thread_id={thread!r})
                  .order_by("created_at")]))
"""

MESSAGES_OF = """
import json
from runs.models import Message
print(json.dumps([[m.seq, m.role, m.content, m.status, str(m.run_id)] for m in
                  Message.objects.filter(thread__thread_id={thread!r}).order_by("seq")]))
"""


def post(deployment, thread, text, request_id):
    return deployment.manage_json(
        "runs", "message", "--thread", thread, text, "--request-id", request_id, "--json"
    )


def open_gate(deployment, name):
    gate = deployment.var_dir / "devices" / "gates" / name
    gate.parent.mkdir(parents=True, exist_ok=True)
    gate.touch()


def runs_of(deployment, thread):
    return shell_json(deployment, RUNS_OF.format(thread=thread))


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_queues_a_message_sent_during_a_run_and_starts_exactly_one_run_after_it(
    deployment_factory, backend
):
    deployment = deployment_factory(backend, extra_env={"AGENTOPS_POLL_SECONDS": 0.1})
    first = start_on_thread(deployment, "chat", "q", {"message": "How warm is it?", "hold": "g1"})
    worker = deployment.popen("worker")
    wait_until(
        lambda: step_status(deployment, first, "plan") == "RUNNING",
        what="plan running",
        procs=(worker,),
    )

    posted = post(deployment, "q", "And in the kitchen?", "req-2")
    assert posted["action"] == "queued"
    assert posted["status"] == "queued" and posted["seq"] is None
    again = post(deployment, "q", "And in the kitchen?", "req-2")
    assert again["action"] == "duplicate"
    assert again["message_id"] == posted["message_id"] and again["run_id"] == posted["run_id"]
    # The queued message is not part of the running run's input.
    contents = [m["content"] for m in run_context(deployment, first, "plan")["model_input"]]
    assert "And in the kitchen?" not in contents
    assert status(deployment, posted["run_id"])["status"] == "PENDING"

    open_gate(deployment, "g1")
    runs = wait_until(
        lambda: (r := runs_of(deployment, "q")) and all(s == "SUCCEEDED" for _, s in r) and r,
        what="both runs to succeed",
        procs=(worker,),
    )
    worker.terminate()
    worker.wait(timeout=60)
    assert [r for r, _ in runs] == [first, posted["run_id"]]
    messages = shell_json(deployment, MESSAGES_OF.format(thread="q"))
    # Gap-free; the queued question got its place when its run started, after the answer.
    assert [m[0] for m in messages] == [1, 2, 3, 4, 5, 6, 7, 8]
    first_run_seqs = [m[0] for m in messages if m[4] == first]
    second_question = next(m for m in messages if m[2] == "And in the kitchen?")
    assert second_question[0] > max(first_run_seqs) and second_question[3] == "final"
    assert len([m for m in messages if m[2] == "And in the kitchen?"]) == 1
    second = run_context(deployment, posted["run_id"], "plan")
    history = [m["content"] for m in second["parts"][1]["messages"]]
    assert history[0] == "How warm is it?" and history[-1] == "And in the kitchen?"


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_interrupts_the_running_run_through_the_cancel_flow_then_starts_the_new_one(
    deployment_factory, backend
):
    deployment = deployment_factory(
        backend, extra_env={"AGENTOPS_POLL_SECONDS": 0.1, "AGENTOPS_LEASE_SECONDS": 3}
    )
    deployment.manage("runs", "policy", "--thread", "i", "interrupt", check=True)
    first = start_on_thread(
        deployment, "chat", "i", {"message": "Think for a long time", "hold": "never"}
    )
    worker = deployment.popen("worker")
    wait_until(
        lambda: step_status(deployment, first, "plan") == "RUNNING",
        what="plan running",
        procs=(worker,),
    )

    posted = post(deployment, "i", "Stop, what is the temperature?", "req-i")
    assert posted["action"] == "interrupting"
    assert posted["interrupted"] == [first]
    runs = wait_until(
        lambda: (r := runs_of(deployment, "i")) and r[-1][1] == "SUCCEEDED" and r,
        what="the new run to succeed",
        procs=(worker,),
    )
    assert runs == [[first, "CANCELLED"], [posted["run_id"], "SUCCEEDED"]]
    again = post(deployment, "i", "Stop, what is the temperature?", "req-i")
    assert again["action"] == "duplicate" and again["run_id"] == posted["run_id"]
    worker.terminate()
    worker.wait(timeout=60)
    assert runs_of(deployment, "i") == runs
    events = shell_json(
        deployment,
        f"""
import json
from runs.models import Event
print(json.dumps([e.type for e in Event.objects.filter(run_id={first!r}).order_by("seq")]))
""",
    )
    assert "run.cancel_requested" in events and events.index("run.cancel_requested") < events.index(
        "run.cancelled"
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_stores_concurrent_resends_of_one_request_id_once(deployment_factory, backend):
    deployment = deployment_factory(backend)
    procs = [
        deployment.popen(
            "runs", "message", "--thread", "r", "How warm is it?", "--request-id", "same", "--json"
        )
        for _ in range(4)
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, deployment.logs(proc)
    answers = [json.loads(deployment.logs(p)[0]) for p in procs]
    assert sorted(a["action"] for a in answers) == ["duplicate"] * 3 + ["started"]
    assert len({(a["message_id"], a["run_id"]) for a in answers}) == 1
    assert len(runs_of(deployment, "r")) == 1
    assert len(shell_json(deployment, MESSAGES_OF.format(thread="r"))) == 1
