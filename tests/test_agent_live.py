"""Agent model requests stream live and the tool calls of one response run at once: the
text reaches the run's draft message as the model writes it, the response is recorded
once, and three calls wait at an outside gate together; a worker killed after two of
their results were recorded runs only the third again. Real worker subprocesses drive
the real ``openai`` client against the loopback model server; the gate is the only
other fake (the outside service the tools call)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from tests.support.agents import SHAPES, deployment, tool_results
from tests.support.deployment_runs import (
    burst_until_status,
    db_id,
    db_rows,
    events,
    run_status,
    start,
    status,
)
from tests.support.openai_server import ModelServer
from tests.support.waiting import wait_until


class Gate:
    """An outside service on loopback: ``GET /?name=X`` waits until ``open(X)`` and
    answers ``fetched X``; ``in_flight``, ``most_at_once`` and ``arrivals`` count."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_at_once = 0
        self.arrivals: dict[str, int] = {}
        self.opened: dict[str, threading.Event] = {}
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                name = parse_qs(urlparse(self.path).query)["name"][0]
                with gate.lock:
                    gate.arrivals[name] = gate.arrivals.get(name, 0) + 1
                    gate.in_flight += 1
                    gate.most_at_once = max(gate.most_at_once, gate.in_flight)
                    opened = gate.opened.setdefault(name, threading.Event())
                opened.wait(120)
                with gate.lock:
                    gate.in_flight -= 1
                data = f"fetched {name}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def open(self, *names: str) -> None:
        with self.lock:
            for name in names:
                self.opened.setdefault(name, threading.Event()).set()

    def close(self) -> None:
        self.open(*"abc")
        self.httpd.shutdown()
        self.httpd.server_close()


def three_fetches(body: dict) -> dict:
    if not tool_results(body):
        return {
            "tool_calls": [
                {"name": "fetch", "arguments": {"name": n}, "id": f"p{n}"} for n in "abc"
            ]
        }
    return {"content": "got " + ", ".join(tool_results(body))}


def test_a_responses_tool_calls_run_at_once_and_a_crash_runs_only_the_unfinished_one(
    deployment_factory,
):
    gate = Gate()
    try:
        with ModelServer(three_fetches) as server:
            d = deployment(
                deployment_factory, server, "postgres", **SHAPES, SHAPES_GATE_URL=gate.url
            )
            run_id = start(d, "shape_parallel", json.dumps({"prompt": "fetch a, b and c"}))
            worker = d.popen("worker")
            wait_until(lambda: gate.in_flight == 3, what="3 calls at the gate", procs=[worker])
            gate.open("a", "b")

            def recorded() -> list[tuple]:
                return db_rows(
                    d,
                    "SELECT idempotency_key FROM runs_operation"
                    " WHERE tool = 'fetch' AND status = 'SUCCEEDED'",
                )

            wait_until(lambda: len(recorded()) == 2, what="2 results recorded", procs=[worker])
            worker.kill()
            worker.wait()
            gate.open("c")
            burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
    finally:
        gate.close()
    assert run_status(d, run_id) == "SUCCEEDED"
    assert gate.most_at_once == 3
    # a and b came from the ledger; only c, in flight when the worker died, ran again.
    assert gate.arrivals == {"a": 1, "b": 1, "c": 2}
    assert tool_results(server.requests[-1]) == ["fetched a", "fetched b", "fetched c"]
    keys = db_rows(d, "SELECT idempotency_key FROM runs_operation WHERE tool = 'fetch'")
    assert sorted(k.rsplit(":", 1)[1] for (k,) in keys) == ["tool.pa", "tool.pb", "tool.pc"]
    s = status(d, run_id)
    assert s["messages"][-1]["content"] == "got fetched a, fetched b, fetched c"
    roles = [(m["role"], m.get("tool_call_id") or "") for m in s["messages"]]
    assert roles == [
        ("user", ""),
        ("assistant", ""),
        ("tool", "pa"),
        ("tool", "pb"),
        ("tool", "pc"),
        ("assistant", ""),
    ]


def test_an_agents_answer_streams_into_its_draft_and_is_recorded_once(deployment_factory):
    hold = threading.Event()
    answer = {"content": "Hello from a streaming agent", "hold": hold, "hold_after": 2}
    with ModelServer(lambda body: answer) as server:
        d = deployment(deployment_factory, server, "postgres", **SHAPES)
        run_id = start(d, "shape_own_model", json.dumps({"prompt": "hi"}))
        worker = d.popen("worker")
        try:

            def draft() -> list[tuple]:
                return db_rows(
                    d,
                    "SELECT message_id, content FROM runs_message"
                    " WHERE run_id = %s AND status = 'draft'",
                    (db_id(d, run_id),),
                )

            wait_until(
                lambda: draft() and draft()[0][1] == "Hello from ",
                what="the first words in the draft",
                procs=[worker],
            )
            # Mid-stream: the request is in the ledger as an intent, not yet a response.
            (op,) = db_rows(d, "SELECT status FROM runs_operation WHERE side_effect = 'model'")
            assert op == ("INTENT",)
        finally:
            hold.set()
        burst_until_status(d, run_id, "SUCCEEDED", "FAILED", "PAUSED")
        worker.terminate()
        worker.wait()
    assert run_status(d, run_id) == "SUCCEEDED"
    assert server.count == 1 and server.requests[0]["stream"] is True
    message_id = events(d, run_id, "message.started")[0]["payload"]["message_id"]
    deltas = [e["payload"] for e in events(d, run_id, "message.delta")]
    assert {p["message_id"] for p in deltas} == {message_id}
    assert "".join(p["text"] for p in deltas) == "Hello from a streaming agent"
    assert [p["offset"] for p in deltas] == [0, 6, 11, 13, 23]
    completed = [e["payload"]["message_id"] for e in events(d, run_id, "message.completed")]
    assert completed == [message_id]
    final = status(d, run_id)["messages"][-1]
    assert (final["role"], final["content"]) == ("assistant", "Hello from a streaming agent")
    recorded = db_rows(d, "SELECT status FROM runs_operation WHERE side_effect = 'model'")
    assert recorded == [("SUCCEEDED",)]


def test_a_long_thread_reaches_the_agent_summarised(deployment_factory):
    """Past ``AGENTOPS_CONTEXT_SUMMARY_TOKENS`` the agent gets the thread's summary and
    its recent messages, not the whole thread."""
    with ModelServer(lambda body: {"content": "noted, " + "and so on " * 10}) as server:
        d = deployment(
            deployment_factory,
            server,
            **SHAPES,
            AGENTOPS_CONTEXT_SUMMARY_TOKENS=30,
            AGENTOPS_CONTEXT_RECENT_MESSAGES=2,
        )
        runs = []
        for turn in range(3):
            prompt = f"question {turn}: " + "tell me more " * 5
            runs.append(
                d.call(
                    "runs",
                    "start",
                    "shape_own_model",
                    "--thread",
                    "L",
                    "--input",
                    json.dumps({"prompt": prompt}),
                ).strip()
            )
            burst_until_status(d, runs[-1], "SUCCEEDED", "FAILED", "PAUSED")
    assert [run_status(d, r) for r in runs] == ["SUCCEEDED"] * 3
    last = server.requests[-1]["messages"]
    assert last[0]["role"] == "system"
    assert last[0]["content"].startswith("Summary of the conversation so far (messages 1..")
    # The summary, then the recent messages in full (2 with the run's own prompt, which
    # the agent gets as its prompt): the earlier questions only through the summary.
    assert [m["role"] for m in last[1:]] == ["assistant", "user"]
    assert last[-1]["content"].startswith("question 2:")
    assert "question 0" not in json.dumps(last[1:]) and "question 1" not in json.dumps(last[1:])
    (summaries,) = db_rows(d, "SELECT count(*) FROM runs_summary")
    assert summaries[0] >= 1
