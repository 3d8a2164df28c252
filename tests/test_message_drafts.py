"""Streamed replies: the reply step's message has its id before generation, pieces
arrive as ``message.delta`` events, and a worker killed mid-reply leaves a superseded
draft, never a half message stored as final."""

import os
import signal

import httpx

from tests.support.api_server import Server, make_user, sse_events
from tests.support.services import Deployment

BODY = {
    "workflow": "room_temperature",
    "thread_id": "t1",
    "input": {"question": "How warm is the living room?"},
}
ANSWER = "It is 23.5 °C in the living room right now."


def _api_of(deployment_factory, **extra_env) -> tuple[Deployment, httpx.Client]:
    """A SQLite deployment with quick polls and ``extra_env``, its API served, and a
    client of it signed in as alice."""
    deployment = deployment_factory(
        "sqlite",
        extra_env={"AGENTOPS_POLL_SECONDS": 0.1, "AGENTOPS_SSE_POLL_SECONDS": 0.1, **extra_env},
    )
    token = make_user(deployment, "alice")
    server = Server(deployment)
    client = httpx.Client(
        base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {token}"}
    )
    return deployment, client


def test_it_supersedes_the_draft_of_a_worker_killed_mid_reply(deployment_factory):
    deployment, client = _api_of(deployment_factory, AGENTOPS_LEASE_SECONDS=2)
    run_id = client.post("/api/v1/runs", json=BODY).json()["id"]
    # Slow words give the test a wide window to kill the worker between two pieces.
    doomed = deployment.popen("worker", extra_env={"AGENTOPS_SIM_WORD_SECONDS": 3})
    replacement = None
    events = []
    with client.stream("GET", f"/api/v1/runs/{run_id}/stream") as response:
        for item in sse_events(response):
            if "comment" in item:
                continue
            events.append((item["event"], item["data"]["payload"]))
            if item["event"] == "message.delta" and replacement is None:
                os.killpg(doomed.pid, signal.SIGKILL)
                doomed.wait(timeout=30)
                replacement = deployment.popen("worker")
    assert replacement is not None, events

    started = [p["message_id"] for t, p in events if t == "message.started"]
    assert len(started) == 2 and started[0] != started[1]
    draft, final = started
    assert (
        "message.superseded",
        {"message_id": draft, "replaced_by": final, "attempt": 2},
    ) in events
    completed = [p["message_id"] for t, p in events if t == "message.completed"]
    assert completed == [final]
    assert events[-1][0] == "run.succeeded"
    # The client rebuilds the final text from the new attempt's pieces, placed by offset.
    pieces = sorted(
        (p["offset"], p["text"])
        for t, p in events
        if t == "message.delta" and p["message_id"] == final
    )
    assert "".join(text for _, text in pieces) == ANSWER
    order = [t for t, p in events if p.get("message_id") in (draft, final)]
    assert order.index("message.superseded") < order.index("message.completed")

    messages = client.get("/api/v1/threads/t1/messages", params={"include_superseded": True}).json()
    by_id = {m["id"]: m for m in messages}
    assert by_id[final]["status"] == "final" and by_id[final]["content"] == ANSWER
    assert by_id[draft]["status"] == "superseded" and ANSWER.startswith(by_id[draft]["content"])
    assert by_id[draft]["content"] != ANSWER
    reply_messages = [m for m in messages if m["id"] in (draft, final) and m["status"] == "final"]
    assert [m["id"] for m in reply_messages] == [final]
    visible = client.get("/api/v1/threads/t1/messages").json()
    assert draft not in {m["id"] for m in visible}
    assert [m["role"] for m in visible] == ["user", "assistant", "tool", "assistant"]
    assert doomed.returncode == -signal.SIGKILL


def test_it_drops_the_draft_when_the_run_is_cancelled_mid_reply(deployment_factory):
    deployment, client = _api_of(
        deployment_factory, AGENTOPS_LEASE_SECONDS=3, AGENTOPS_SWEEP_SECONDS=0.5
    )
    run_id = client.post("/api/v1/runs", json=BODY).json()["id"]
    deployment.popen("worker", extra_env={"AGENTOPS_SIM_WORD_SECONDS": 2})
    events, cancelled = [], None
    with client.stream("GET", f"/api/v1/runs/{run_id}/stream") as response:
        for item in sse_events(response):
            if "comment" in item:
                continue
            events.append((item["event"], item["data"]["payload"]))
            if item["event"] == "message.delta" and cancelled is None:
                etag = client.get(f"/api/v1/runs/{run_id}").headers["ETag"]
                cancelled = client.post(
                    f"/api/v1/runs/{run_id}/cancel",
                    json={"reason": "user left"},
                    headers={"If-Match": etag},
                )
    assert cancelled is not None and cancelled.status_code == 200, cancelled
    (draft,) = [p["message_id"] for t, p in events if t == "message.started"]
    superseded = [p for t, p in events if t == "message.superseded"]
    assert superseded == [
        {"message_id": draft, "replaced_by": None, "attempt": 1, "reason": "cancel requested"}
    ]
    assert not any(t == "message.completed" for t, _ in events)
    assert events[-1][0] == "run.cancelled"
    visible = client.get("/api/v1/threads/t1/messages").json()
    assert draft not in {m["id"] for m in visible}
    assert all(m["status"] == "final" for m in visible)
