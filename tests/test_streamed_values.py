"""A streamed reply holding NUL: every ``message.delta`` is stored with NUL escaped, at an
offset into the stored text, on SQLite and PostgreSQL; the SSE stream sends the escaped
pieces, a client placing them by offset rebuilds exactly the final message, and the
console shows it escaped. Real worker and server subprocesses, the model an
OpenAI-compatible server on loopback."""

import json

import httpx
import pytest

from runs.engine.state.values import NUL_ESCAPE
from tests.support.api_server import Server, make_user, sse_events
from tests.support.deployment_runs import burst_until, db_rows, events, run_status
from tests.support.openai_server import ModelServer, conversation
from tests.support.services import BACKENDS

REPLY = "It is 23\x00.5 degrees in the living\x00room."
STORED = REPLY.replace("\x00", NUL_ESCAPE)


def brain(body: dict) -> dict:
    """room_temperature over the OpenAI wire; the answer holds NUL twice."""
    _, results = conversation(body)
    if not results and body.get("tools"):
        return {"tool_calls": [{"name": "thermostat_read", "arguments": {"room": "living room"}}]}
    return {"content": REPLY}


def _rebuilt(pieces: list[dict]) -> str:
    text = ""
    for p in sorted(pieces, key=lambda p: p["offset"]):
        text = text[: p["offset"]] + p["text"]
    return text


@pytest.mark.parametrize("backend", BACKENDS)
def test_streamed_pieces_with_nul_are_stored_sent_and_shown_escaped(deployment_factory, backend):
    with ModelServer(brain) as server:
        d = deployment_factory(
            backend,
            extra_env={
                "AGENTOPS_MODEL": "openai:test-model",
                "OPENAI_BASE_URL": server.base_url,
                "OPENAI_API_KEY": "test-key",
                "AGENTOPS_SSE_POLL_SECONDS": 0.1,
            },
        )
        token = make_user(d, "alice")
        api = Server(d)
        client = httpx.Client(
            base_url=api.url, timeout=60, headers={"Authorization": f"Bearer {token}"}
        )
        body = {"workflow": "room_temperature", "thread_id": "t1", "input": {"question": "q"}}
        run_id = client.post("/api/v1/runs", json=body).json()["id"]
        burst_until(d, "SUCCEEDED", lambda: run_status(d, run_id) == "SUCCEEDED")
        assert [bool(r.get("stream")) for r in server.requests] == [False, True]

    # Stored: the events and the final message, escaped alike.
    deltas = [e["payload"] for e in events(d, run_id, "message.delta")]
    assert len(deltas) > 1
    assert all("\x00" not in p["text"] for p in deltas)
    assert _rebuilt(deltas) == STORED
    rows = db_rows(d, "SELECT content FROM runs_message WHERE role = 'assistant' ORDER BY seq")
    assert rows[-1][0] == STORED

    # Sent: the SSE stream replays the same escaped pieces.
    sent = []
    with client.stream("GET", f"/api/v1/runs/{run_id}/stream") as response:
        assert response.status_code == 200
        for item in sse_events(response):
            if item.get("event") == "message.delta":
                sent.append(item["data"]["payload"])
            if item.get("event") == "run.succeeded":
                break
    assert sent == deltas
    messages = client.get("/api/v1/threads/t1/messages").json()
    assert messages[-1]["content"] == STORED

    # Shown: the console's run page, rendered by the deployment itself.
    code = _CONSOLE.replace("RUN_ID", run_id).replace("STORED", repr(STORED))
    page = d.shell(code)
    shown = json.loads(page.strip().splitlines()[-1])
    assert shown == {"status": 200, "escaped": True, "raw_nul": False}


_CONSOLE = """
import json
from django.contrib.auth.models import User
from django.test import Client
from runs.console.roles import setup_roles
alice = User.objects.get(username="alice")
alice.groups.add(setup_roles()["viewer"])
client = Client(SERVER_NAME="127.0.0.1")
client.force_login(alice)
page = client.get("/runs/RUN_ID/")
text = page.content.decode()
shown = {"status": page.status_code, "escaped": STORED in text, "raw_nul": chr(0) in text}
print(json.dumps(shown))
"""
