"""Pydantic AI agents of common shapes (tests/workflows/agent_shapes.py) run as they
would anywhere else: tool control flow, deps, thread history, per-run options, retries
per model request, the agent's own model, usage limits, errors of the agent loop. Real
worker subprocesses drive the real ``openai`` client against the loopback model server
(tests/support/openai_server.py), the only fake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.agents import SHAPES, deployment, tool_call, tool_results, tool_then_answer
from tests.support.deployment_runs import (
    approval_id,
    burst_until,
    burst_until_status,
    db_id,
    db_rows,
    events,
    make_user,
    run_status,
    start,
    status,
)
from tests.support.openai_server import ModelServer
from tests.support.services import Deployment


def shapes(deployment_factory, server: ModelServer, **extra) -> Deployment:
    return deployment(deployment_factory, server, **SHAPES, **extra)


def tool_runs(d: Deployment) -> dict[str, int]:
    """How many times each tool of the shapes actually ran."""
    path = Path(d.env["AGENTOPS_DEVICE_DIR"]) / "tool_calls.json"
    return json.loads(path.read_text()) if path.exists() else {}


def taken_over_with(d: Deployment, run_id: str) -> str:
    """The error code of the run's step that ended in a takeover."""
    rows = db_rows(
        d,
        "SELECT error_code FROM runs_step WHERE run_id = %s AND status = 'FAILED' ORDER BY id",
        (db_id(d, run_id),),
    )
    return rows[-1][0] if rows else ""


# -- tool control flow -------------------------------------------------------------------


def number_brain(body: dict) -> dict:
    """Picks 3, then (told it is too small) 7, then answers."""
    results = tool_results(body)
    if not results:
        return tool_call("pick_number", {"n": 3}, "c1")
    if len(results) == 1:
        return tool_call("pick_number", {"n": 7}, "c2")
    return {"content": "I picked 7."}


def test_a_tools_model_retry_sends_the_model_its_hint(deployment_factory):
    with ModelServer(number_brain) as server:
        d = shapes(deployment_factory, server)
        run_id = start(d, "shape_retry", json.dumps({"prompt": "pick a number"}))
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert run_status(d, run_id) == "SUCCEEDED"
    assert "too small" in tool_results(server.requests[1])[0]
    assert server.count == 3
    assert tool_runs(d) == {"pick_number": 2}
    outcomes = db_rows(
        d, "SELECT result FROM runs_operation WHERE tool = 'pick_number' ORDER BY id"
    )
    recorded = [r if isinstance(r, dict) else json.loads(r) for (r,) in outcomes]
    assert recorded[0]["agentops_outcome"] == "model_retry"
    assert recorded[1] == 7


def test_a_recorded_model_retry_is_replayed_after_a_crash_not_run_again(deployment_factory):
    with ModelServer(number_brain) as server:
        d = shapes(deployment_factory, server)
        flags = ("--crash-after-model", "2")
        run_id = start(d, "shape_retry", json.dumps({"prompt": "pick a number"}), *flags)
        first = d.manage("worker", "--burst", timeout=120)
        assert first.returncode == 75, first.stdout + first.stderr
        assert (server.count, tool_runs(d)) == (2, {"pick_number": 1})
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert run_status(d, run_id) == "SUCCEEDED"
    # The retry outcome came from the ledger: the tool ran once more (n=7), no more.
    assert (server.count, tool_runs(d)) == (3, {"pick_number": 2})


def test_a_tool_retrying_past_its_retries_is_taken_over_with_the_calls_recorded(
    deployment_factory,
):
    with ModelServer(lambda body: tool_call("pick_number", {"n": 1})) as server:
        d = shapes(deployment_factory, server)
        run_id = start(d, "shape_retry", json.dumps({"prompt": "pick a number"}))
        worker = d.manage("worker", "--burst", timeout=120)
    assert "Traceback" not in worker.stderr
    s = status(d, run_id)
    assert (s["status"], s["takeover"]["cause"]) == ("PAUSED", "retries_exhausted")
    assert taken_over_with(d, run_id) == "MODEL_RESPONSE_INVALID"
    (detail,) = db_rows(
        d, "SELECT error_detail FROM runs_step WHERE run_id = %s", (db_id(d, run_id),)
    )
    assert "exceeded max retries" in detail[0]
    # retries=2: the first call and two retries, each hint recorded: the step a person
    # retries makes the same messages again from the ledger.
    assert server.count == 3
    outcomes = db_rows(
        d, "SELECT result FROM runs_operation WHERE tool = 'pick_number' ORDER BY id"
    )
    recorded = [r if isinstance(r, dict) else json.loads(r) for (r,) in outcomes]
    assert [r["agentops_outcome"] for r in recorded] == ["model_retry"] * 2 + ["retries_exceeded"]
    assert "too small" in recorded[0]["message"]


deleting_brain = tool_then_answer(
    "delete_file", {"path": "/tmp/report.txt"}, "d1", lambda result: "Done: " + result
)


def test_a_tool_asking_for_approval_waits_for_an_approver_and_runs_once(deployment_factory):
    with ModelServer(deleting_brain) as server:
        d = shapes(deployment_factory, server)
        make_user(d, "ann", approver=True)
        run_id = start(d, "shape_approval", json.dumps({"prompt": "delete the report"}))
        burst_until_status(d, run_id, "WAITING_APPROVAL", "FAILED", "PAUSED")
        assert run_status(d, run_id) == "WAITING_APPROVAL"
        assert tool_runs(d) == {}  # asked, not run
        (question,) = db_rows(
            d, "SELECT question FROM approvals_approval WHERE run_id = %s", (db_id(d, run_id),)
        )
        assert "delete_file" in question[0] and "/tmp/report.txt" in question[0]
        decided = d.manage("approvals", "decide", approval_id(d, run_id), "approve", "--as", "ann")
        assert decided.returncode == 0, decided.stderr
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert run_status(d, run_id) == "SUCCEEDED"
    assert tool_runs(d) == {"delete_file": 1}
    assert status(d, run_id)["messages"][-1]["content"] == "Done: deleted /tmp/report.txt"
    assert server.count == 2


def test_a_tool_asking_for_approval_is_rejected_with_a_message(deployment_factory):
    with ModelServer(deleting_brain) as server:
        d = shapes(deployment_factory, server)
        make_user(d, "ann", approver=True)
        run_id = start(d, "shape_approval", json.dumps({"prompt": "delete the report"}))
        burst_until_status(d, run_id, "WAITING_APPROVAL", "FAILED", "PAUSED")
        rejected = d.manage(
            "approvals",
            "decide",
            approval_id(d, run_id),
            "reject",
            "--message",
            "keep it",
            "--as",
            "ann",
        )
        assert rejected.returncode == 0, rejected.stderr
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert run_status(d, run_id) == "SUCCEEDED"
    assert tool_runs(d) == {}
    assert tool_results(server.requests[-1]) == ["keep it"]


def test_a_bug_in_a_tool_pauses_the_run_for_a_person_with_its_own_code(deployment_factory):
    with ModelServer(lambda body: tool_call("buggy_lookup", {"key": "k"})) as server:
        d = shapes(deployment_factory, server)
        run_id = start(d, "shape_tool_errors", json.dumps({"prompt": "look k up"}))
        worker = d.manage("worker", "--burst", timeout=120)
    assert worker.returncode == 0, worker.stderr
    s = status(d, run_id)
    assert s["status"] == "PAUSED"
    assert s["takeover"]["cause"] == "retries_exhausted"
    (step,) = db_rows(d, "SELECT error_code, error_detail FROM runs_step WHERE name = 'agent'")
    assert step[0] == "TOOL_ERROR"
    assert "buggy_lookup raised KeyError" in step[1]
    assert events(d, run_id, "step.retry_scheduled") == []
    assert (server.count, tool_runs(d)) == (1, {"buggy_lookup": 1})


def test_a_transient_tool_error_is_retried_by_the_steps_policy(deployment_factory):
    brain = tool_then_answer("flaky_lookup", {"key": "k"}, "f1")

    with ModelServer(brain) as server:
        d = shapes(deployment_factory, server)
        run_id = start(d, "shape_tool_errors", json.dumps({"prompt": "look k up"}))
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert run_status(d, run_id) == "SUCCEEDED"
    (retry,) = events(d, run_id, "step.retry_scheduled")
    assert retry["payload"]["error_code"] == "DEPENDENCY_UNAVAILABLE"
    assert tool_runs(d) == {"flaky_lookup": 2}
    # The re-executed step reused the recorded model response: 2 requests, not 3.
    assert server.count == 2


# -- deps, history, per-run options ---------------------------------------------------------


capital_brain = tool_then_answer("capital", {}, "k1", lambda result: f"The capital is {result}.")


def test_deps_reach_the_agents_tools(deployment_factory):
    with ModelServer(capital_brain) as server:
        d = shapes(deployment_factory, server)
        body = {"prompt": "what is my capital?", "deps": {"country": "Mexico"}}
        run_id = start(d, "shape_deps", json.dumps(body))
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    s = status(d, run_id)
    assert (s["status"], s["messages"][-1]["content"]) == (
        "SUCCEEDED",
        "The capital is Mexico City.",
    )


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({}, "input.deps"),
        ({"deps": {"country": 5}}, "input.deps.country"),
        ({"deps": {"country": "Mexico"}, "usage_limits": {"request_limt": 2}}, None),
        ({"deps": {"country": "Mexico"}, "model_settings": {"temperature": "hot"}}, None),
        ({"deps": {"country": "Mexico"}, "colour": "red"}, "input.colour"),
    ],
)
def test_an_input_that_does_not_fit_the_agent_is_refused_at_start(deployment_factory, extra, field):
    with ModelServer(capital_brain) as server:
        d = shapes(deployment_factory, server)
        body = json.dumps({"prompt": "capital?", **extra})
        refused = d.manage("runs", "start", "shape_deps", "--thread", "T", "--input", body)
    assert refused.returncode != 0
    assert "invalid_input" in refused.stderr
    if field:
        assert field in refused.stderr
    assert db_rows(d, "SELECT count(*) FROM runs_run") == [(0,)]
    assert server.count == 0


def test_a_workflow_refuses_per_run_options_it_does_not_allow(deployment_factory):
    with ModelServer(capital_brain) as server:
        d = shapes(deployment_factory, server)
        body = json.dumps({"prompt": "loop", "model": "openai:other"})
        refused = d.manage("runs", "start", "shape_loop", "--thread", "T", "--input", body)
    assert refused.returncode != 0
    assert "input.model" in refused.stderr


def test_per_run_model_and_settings_reach_the_request(deployment_factory):
    with ModelServer(capital_brain) as server:
        d = shapes(deployment_factory, server)
        body = {
            "prompt": "capital?",
            "deps": {"country": "France"},
            "model": "openai:per-run-model",
            "model_settings": {"temperature": 0.25},
            "metadata": {"ticket": "T-1"},
        }
        run_id = start(d, "shape_deps", json.dumps(body))
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert run_status(d, run_id) == "SUCCEEDED"
    assert [(r["model"], r.get("temperature")) for r in server.requests] == [
        ("per-run-model", 0.25),
        ("per-run-model", 0.25),
    ]


def test_the_threads_earlier_messages_are_the_agents_history(deployment_factory):
    def brain(body):
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        return {"content": f"answer {len(users)}"}

    with ModelServer(brain) as server:
        d = shapes(deployment_factory, server)
        first = d.call(
            "runs",
            "start",
            "shape_own_model",
            "--thread",
            "H",
            "--input",
            json.dumps({"prompt": "first question"}),
        ).strip()
        burst_until_status(d, first, "SUCCEEDED", "FAILED", "PAUSED")
        second = d.call(
            "runs",
            "start",
            "shape_own_model",
            "--thread",
            "H",
            "--input",
            json.dumps({"prompt": "second question"}),
        ).strip()
        burst_until_status(d, second, "SUCCEEDED", "FAILED", "PAUSED")
    conversation = [(m["role"], m["content"]) for m in server.requests[1]["messages"]]
    assert conversation == [
        ("user", "first question"),
        ("assistant", "answer 1"),
        ("user", "second question"),
    ]
    assert status(d, second)["messages"][-1]["content"] == "answer 2"


# -- limits and errors of the agent loop ---------------------------------------------------


def test_usage_limits_stop_a_looping_agent_and_keep_its_messages(deployment_factory):
    with ModelServer(lambda body: tool_call("again", {})) as server:
        d = shapes(deployment_factory, server)
        body = json.dumps({"prompt": "loop", "usage_limits": {"request_limit": 3}})
        run_id = start(d, "shape_loop", body)
        worker = d.manage("worker", "--burst", timeout=120)
    assert "Traceback" not in worker.stderr
    s = status(d, run_id)
    assert (s["status"], s["error_code"]) == ("FAILED", "USAGE_LIMIT_EXCEEDED")
    assert server.count == 3
    roles = [m["role"] for m in s["messages"]]
    assert roles == ["user"] + ["assistant", "tool"] * 3


def test_pydantic_ais_default_request_limit_stays_on(deployment_factory):
    with ModelServer(lambda body: tool_call("again", {})) as server:
        d = shapes(deployment_factory, server)
        run_id = start(d, "shape_loop", json.dumps({"prompt": "loop"}))
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert status(d, run_id)["error_code"] == "USAGE_LIMIT_EXCEEDED"
    assert server.count == 50  # UsageLimits().request_limit


def test_an_empty_answer_after_a_tool_is_taken_over_classified_with_the_call_kept(
    deployment_factory,
):
    brain = tool_then_answer("capital", {}, "k1", lambda result: "")

    with ModelServer(brain) as server:
        d = shapes(deployment_factory, server)
        body = {"prompt": "capital?", "deps": {"country": "Mexico"}}
        run_id = start(d, "shape_deps", json.dumps(body))
        worker = d.manage("worker", "--burst", timeout=120)
    assert "Traceback" not in worker.stderr
    s = status(d, run_id)
    assert (s["status"], taken_over_with(d, run_id)) == ("PAUSED", "MODEL_RESPONSE_INVALID")
    recorded = db_rows(d, "SELECT tool, result FROM runs_operation WHERE tool = 'capital'")
    assert [(tool, json.loads(r) if isinstance(r, str) else r) for tool, r in recorded] == [
        ("capital", "Mexico City")
    ]


def test_an_answer_out_of_shape_past_the_output_retries_is_taken_over(deployment_factory):
    with ModelServer(lambda body: {"content": "about seven"}) as server:
        d = shapes(deployment_factory, server)
        run_id = start(d, "shape_output", json.dumps({"prompt": "how many?"}))
        worker = d.manage("worker", "--burst", timeout=120)
    assert worker.returncode == 0 and "Traceback" not in worker.stderr, worker.stderr
    s = status(d, run_id)
    assert (s["status"], s["takeover"]["cause"]) == ("PAUSED", "retries_exhausted")
    assert taken_over_with(d, run_id) == "MODEL_RESPONSE_INVALID"
    # retries=1: the answer and one retry, no more.
    assert server.count == 2


# -- model requests --------------------------------------------------------------------------


def test_each_model_request_is_retried_on_its_own(deployment_factory):
    """A 500 on the first try of each of the run's three requests: each request retries
    itself; the step's attempts are not spent."""
    tries: dict[int, int] = {}

    def brain(body):
        turn = len(tool_results(body))
        tries[turn] = tries.get(turn, 0) + 1
        if tries[turn] == 1:
            return {"status": 500, "error": "overloaded"}
        if turn < 2:
            return tool_call("again", {}, f"a{turn}")
        return {"content": "done"}

    with ModelServer(brain) as server:
        d = shapes(deployment_factory, server)
        run_id = start(d, "shape_loop", json.dumps({"prompt": "twice"}))
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert run_status(d, run_id) == "SUCCEEDED"
    assert server.count == 6
    assert events(d, run_id, "step.retry_scheduled") == []
    retried = events(d, run_id, "model.request_retry")
    assert [(e["payload"]["ordinal"], e["payload"]["error_code"]) for e in retried] == [
        (0, "DEPENDENCY_UNAVAILABLE"),
        (1, "DEPENDENCY_UNAVAILABLE"),
        (2, "DEPENDENCY_UNAVAILABLE"),
    ]
    assert status(d, run_id)["budget"]["used"]["model_calls"] == 6


def test_the_agents_own_model_answers_not_agentops_model(deployment_factory):
    with ModelServer(lambda body: {"content": "hello"}) as server:
        d = shapes(deployment_factory, server)
        run_id = start(d, "shape_own_model", json.dumps({"prompt": "hi"}))
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert run_status(d, run_id) == "SUCCEEDED"
    assert [r["model"] for r in server.requests] == ["own-model"]
    (name,) = db_rows(d, "SELECT tool FROM runs_operation WHERE side_effect = 'model'")
    assert name == ("openai:own-model",)


def test_a_fallback_models_member_is_recorded_and_priced_as_itself(deployment_factory):
    def brain(body):
        if body["model"] == "primary":
            return {"status": 503, "error": "primary is down"}
        return {"content": "from the backup"}

    prices = {"openai:backup": {"input": "1.00", "output": "1.00"}}
    with ModelServer(brain) as server:
        d = shapes(deployment_factory, server, AGENTOPS_MODEL_PRICES=json.dumps(prices))
        run_id = start(d, "shape_fallback", json.dumps({"prompt": "hi"}))
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert run_status(d, run_id) == "SUCCEEDED"
    assert [r["model"] for r in server.requests] == ["primary", "backup"]
    (result,) = db_rows(d, "SELECT result FROM runs_operation WHERE side_effect = 'model'")
    recorded = result[0] if isinstance(result[0], dict) else json.loads(result[0])
    # 11 input + 7 output tokens at 1 USD per million each.
    assert (recorded["model"], recorded["cost_usd"]) == ("openai:backup", "0.000018")
    assert status(d, run_id)["budget"]["used"]["cost_usd"] == "0.000018"


# -- one event loop per process ------------------------------------------------------------


def test_two_runs_of_an_mcp_agent_work_in_one_worker(deployment_factory):
    brain = tool_then_answer("add", {"a": 2, "b": 3}, answer=lambda result: f"The sum is {result}.")

    with ModelServer(brain) as server:
        d = shapes(deployment_factory, server)
        runs = [start(d, "shape_mcp", json.dumps({"prompt": f"add, take {i}"})) for i in (1, 2)]
        worker = d.manage("worker", "--burst", timeout=120)
    assert worker.returncode == 0, worker.stderr
    assert [run_status(d, r) for r in runs] == ["SUCCEEDED", "SUCCEEDED"]
    assert [status(d, r)["messages"][-1]["content"] for r in runs] == ["The sum is 5."] * 2
    assert server.count == 4


def test_an_event_stream_handler_gets_each_event_once_across_a_crash(deployment_factory):
    brain = tool_then_answer("again", {}, "e1", lambda result: "finished")

    def seen(workflow: str) -> list[str]:
        path = Path(d.env["AGENTOPS_DEVICE_DIR"]) / f"{workflow}.jsonl"
        return [json.loads(line)["event"] for line in path.read_text().splitlines()]

    with ModelServer(brain) as server:
        d = shapes(deployment_factory, server)
        # The handler given to register_agent, and one the agent itself carries.
        workflows = ("shape_events", "shape_events_own")
        crashed = []
        for workflow in workflows:
            flags = ("--crash-after-model", "1")
            crashed.append(start(d, workflow, json.dumps({"prompt": "go"}), *flags))
            first = d.manage("worker", "--burst", timeout=120)
            assert first.returncode == 75, first.stdout + first.stderr
        burst_until(
            d, "both SUCCEEDED", lambda: all(run_status(d, r) != "RUNNING" for r in crashed)
        )
        assert [run_status(d, r) for r in crashed] == ["SUCCEEDED", "SUCCEEDED"]
        # The first response reached the handler live; the worker died as it was
        # recorded, and the re-executed step reuses it without sending its events or
        # its tool call again: only the call's result (made now) and the answer follow.
        assert [seen(w) for w in workflows] == [["part:tool-call", "result:e1", "part:text"]] * 2
        assert server.count == 4
        uncrashed = start(d, "shape_events_own", json.dumps({"prompt": "go"}))
        burst_until_status(d, uncrashed, "SUCCEEDED", "FAILED", "PAUSED")
    assert seen("shape_events_own")[3:] == ["part:tool-call", "call:e1", "result:e1", "part:text"]
    assert run_status(d, uncrashed) == "SUCCEEDED"


# -- CallDeferred -----------------------------------------------------------------------------


export_brain = tool_then_answer(
    "start_export", {"report": "q3"}, "x1", lambda result: "Export result: " + result
)


def test_a_deferred_call_waits_for_its_outside_result_delivered_by_the_cli(deployment_factory):
    with ModelServer(export_brain) as server:
        d = shapes(deployment_factory, server)
        run_id = start(d, "shape_deferred", json.dumps({"prompt": "export q3"}))
        burst_until_status(d, run_id, "WAITING_EXTERNAL", "FAILED", "PAUSED", "SUCCEEDED")
        assert run_status(d, run_id) == "WAITING_EXTERNAL"
        # No lease, no worker while it waits.
        assert db_rows(d, "SELECT owner, lease_until FROM runs_step WHERE name = 'deliver'") == [
            ("", None)
        ]
        wrong = d.manage("runs", "deliver", run_id, "--call", "nope", "--result", "1")
        assert wrong.returncode == 1
        assert "invalid_input" in wrong.stderr and "x1 (start_export)" in wrong.stderr
        result = json.dumps({"url": "https://exports.example/q3.csv"})
        flags = ("--call", "x1", "--result", result, "--request-id", "r1")
        assert "delivered; run is RUNNING" in d.call("runs", "deliver", run_id, *flags)
        assert "delivered before" in d.call("runs", "deliver", run_id, *flags)
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert run_status(d, run_id) == "SUCCEEDED"
    (sent,) = tool_results(server.requests[-1])
    assert json.loads(sent) == {"url": "https://exports.example/q3.csv"}
    assert status(d, run_id)["messages"][-1]["content"] == f"Export result: {sent}"
    assert tool_runs(d) == {"start_export": 1}
    assert server.count == 2


def test_a_deferred_call_past_its_timeout_tells_the_model_none_came(deployment_factory):
    with ModelServer(export_brain) as server:
        d = shapes(deployment_factory, server)
        run_id = start(d, "shape_deferred_timeout", json.dumps({"prompt": "export q3"}))
        burst_until_status(d, run_id, "WAITING_EXTERNAL", "FAILED", "PAUSED", "SUCCEEDED")
        moved = db_rows(
            d,
            "UPDATE runs_step SET wait_until = %s WHERE name = 'deliver' AND status = 'WAITING'"
            " RETURNING id",
            ("2000-01-01 00:00:00",),
        )
        assert len(moved) == 1
        swept = d.manage("sweeper", "--once", timeout=120, check=True)
        assert "'signal_waits_timed_out': 1" in swept.stdout
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert run_status(d, run_id) == "SUCCEEDED"
    assert "within 60 s" in tool_results(server.requests[-1])[0]


def test_the_api_delivers_a_deferred_calls_result_once_per_key(deployment_factory):
    import httpx

    from agentops_client import Client
    from tests.support.api_server import Server
    from tests.support.api_server import make_user as api_user

    with ModelServer(export_brain) as server:
        d = shapes(deployment_factory, server)
        token = api_user(d, "op", staff=True, perms=("runs.view_run", "runs.operate_run"))
        run_id = start(d, "shape_deferred", json.dumps({"prompt": "export q3"}))
        burst_until_status(d, run_id, "WAITING_EXTERNAL", "FAILED", "PAUSED", "SUCCEEDED")
        api = Server(d)
        try:
            base = f"{api.url}/api/v1/runs/{run_id}/tool-calls"
            auth = {"Authorization": f"Bearer {token}"}
            with httpx.Client(timeout=30) as http:
                wrong = http.post(f"{base}/nope/result", json=1, headers=auth)
                assert wrong.status_code == 422 and wrong.json()["code"] == "invalid_input"
            with Client(api.url, token) as client:
                first = client.deliver_tool_result(
                    run_id, "x1", {"rows": 3}, idempotency_key="exp-1"
                )
                again = client.deliver_tool_result(
                    run_id, "x1", {"rows": 3}, idempotency_key="exp-1"
                )
        finally:
            api.kill()
        assert first == again and (first.replayed, again.replayed) == (False, True)
        assert (first.consumed, first.run_status) == (True, "RUNNING")
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    assert [json.loads(r) for r in tool_results(server.requests[-1])] == [{"rows": 3}]
