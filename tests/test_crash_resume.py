"""The crash-and-resume story through the CLI, with real worker subprocesses, on SQLite
(database polling) and on PostgreSQL + Redis (RQ)."""

import pytest

from tests.support.deployment_runs import events_of, facts, start_with_command
from tests.support.services import BACKENDS

QUESTION = '{"question": "How warm is the living room?"}'


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_resumes_after_the_worker_dies_before_reply(deployment_factory, backend):
    d = deployment_factory(backend)
    run_id = start_with_command(d, "room_temperature", "T", QUESTION, "--crash-before", "reply")

    crashed = d.manage("worker", "--burst", timeout=120)
    assert crashed.returncode == 75, crashed.stdout + crashed.stderr
    assert "CRASH before reply, exit=75 (no cleanup)" in crashed.stdout
    assert "ENTER read_temperature" in crashed.stdout
    assert "ENTER reply" not in crashed.stdout

    status = d.manage_json("runs", "status", "--thread", "T", "--json")
    assert status["run_id"] == run_id
    assert status["status"] == "RUNNING"
    assert status["next_step"] == "reply"
    assert [m["role"] for m in status["messages"]] == ["user", "assistant", "tool"]
    call = status["messages"][1]["tool_calls"][0]
    assert call["name"] == "thermostat.read"
    assert status["messages"][2]["tool_call_id"] == call["id"]
    assert status["calls"] == {"thermostat.read": 1}

    d.manage("runs", "resume", "--thread", "T", check=True)
    second = d.manage("worker", "--burst", timeout=120, check=True)
    assert "ENTER reply" in second.stdout
    assert "ENTER plan" not in second.stdout and "ENTER read_temperature" not in second.stdout

    status = d.manage_json("runs", "status", "--thread", "T", "--json")
    assert status["status"] == "SUCCEEDED"
    assert status["next_step"] is None
    assert len(status["messages"]) == 4
    assert "23.5 °C" in status["messages"][-1]["content"]
    assert status["calls"] == {"thermostat.read": 1}
    # The crashed worker had claimed reply and gave it back uncounted before running
    # it: the resumed claim has the next fencing token.
    attempts = {s["name"]: s["attempt"] for s in status["steps"]}
    assert attempts == {"plan": 1, "read_temperature": 1, "reply": 2}
    info = facts(d, run_id)
    [released] = events_of(info, "step.released")
    assert released["payload"] == {"attempt": 1, "reason": "fault injected"}
    [injected] = events_of(info, "fault.injected")
    assert injected["payload"]["fault"] == "crash_before" and injected["seq"] > released["seq"]


def test_it_refuses_bad_cli_input_with_a_message_and_nothing_stored(deployment_factory):
    d = deployment_factory("sqlite")
    bad_json = d.manage("runs", "start", "room_temperature", "--thread", "T", "--input", "{nope")
    assert bad_json.returncode != 0 and "not valid JSON" in bad_json.stderr
    unknown = d.manage("runs", "start", "no_such_flow", "--thread", "T", "--input", "{}")
    assert unknown.returncode != 0 and "unknown_workflow" in unknown.stderr
    missing = d.manage("runs", "start", "room_temperature", "--thread", "T", "--input", "{}")
    assert missing.returncode != 0 and "input.question" in missing.stderr
    step = d.manage(
        "runs",
        "start",
        "room_temperature",
        "--thread",
        "T",
        "--input",
        QUESTION,
        "--crash-before",
        "nope",
    )
    assert step.returncode != 0 and "unknown_step" in step.stderr
    status = d.manage("runs", "status", "--thread", "T")
    assert status.returncode != 0 and "no run on thread" in status.stderr


def test_the_demo_command_tells_the_whole_story(deployment_factory):
    d = deployment_factory("sqlite")
    demo = d.manage("demo", timeout=300, check=True)
    assert "CRASH before reply, exit=75" in demo.stdout
    assert "worker #1 exited with 75" in demo.stdout
    assert "ANSWER: It is 23.5 °C in the living room right now." in demo.stdout
    assert "thermostat reads for this run: 1" in demo.stdout


def test_it_takes_down_a_forking_rq_worker_not_only_its_work_horse(deployment_factory):
    d = deployment_factory("postgres")
    d.manage(
        "runs",
        "start",
        "room_temperature",
        "--thread",
        "F",
        "--input",
        QUESTION,
        "--crash-before",
        "reply",
        check=True,
    )
    crashed = d.manage("worker", "--burst", "--fork", timeout=120)
    assert crashed.returncode == 75, crashed.stdout + crashed.stderr
    assert "CRASH before reply" in crashed.stdout
    status = d.manage_json("runs", "status", "--thread", "F", "--json")
    assert status["next_step"] == "reply" and len(status["messages"]) == 3
    d.manage("runs", "resume", "--thread", "F", check=True)
    d.manage("worker", "--burst", "--fork", timeout=120, check=True)
    status = d.manage_json("runs", "status", "--thread", "F", "--json")
    assert status["status"] == "SUCCEEDED"
    assert status["calls"] == {"thermostat.read": 1}


@pytest.mark.parametrize(
    "budget",
    [
        "[1]",
        '{"tool_calls": "x"}',
        '{"cost_usd": "abc"}',
        '{"tool_calls": true}',
        '{"tool_calls": -1}',
        '{"nonsense": 1}',
        '{"tool_calls": 1.5}',
    ],
)
def test_it_refuses_a_bad_budget_before_storing_anything(deployment_factory, budget):
    d = deployment_factory("sqlite")
    proc = d.manage(
        "runs",
        "start",
        "room_temperature",
        "--thread",
        "B",
        "--input",
        QUESTION,
        "--budget",
        budget,
    )
    assert proc.returncode != 0 and "invalid_budget" in proc.stderr
    count = d.shell("from runs.models import Run; print(Run.objects.count())")
    assert count.strip() == "0"


@pytest.mark.parametrize("backend", BACKENDS)
def test_it_refuses_nul_characters_the_same_on_every_backend(deployment_factory, backend):
    d = deployment_factory(backend)
    proc = d.manage(
        "runs", "start", "room_temperature", "--thread", "N", "--input", '{"question": "a\\u0000b"}'
    )
    assert proc.returncode != 0 and "invalid_input" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_it_refuses_to_act_in_the_name_of_an_unknown_or_unauthorised_user(deployment_factory):
    d = deployment_factory("sqlite")
    run_id = start_with_command(d, "room_temperature", "A", QUESTION)
    d.shell("from django.contrib.auth.models import User; User.objects.create_user('viewer')")
    for who, code in (("nobody", "unknown_user"), ("viewer", "permission_denied")):
        proc = d.manage(
            "runs", "budget", run_id, "--add-tool-calls", "1", "--reason", "r", "--as", who
        )
        assert proc.returncode != 0 and code in proc.stderr
        check = d.manage("artifacts", "check", "--repair", "--as", who)
        assert check.returncode != 0 and code in check.stderr
    events = d.shell(
        "from runs.models import Event; print(Event.objects.filter(type='budget.raised').count())"
    )
    assert events.strip() == "0"
