"""The SSE stream served by a real uvicorn process: replay after Last-Event-ID (header
and query parameter), live follow, heartbeats, the end at a terminal state, and no
event lost or repeated across reconnects and a server crash (``agentops_client``'s
``stream_events`` reconnecting by itself)."""

import contextlib

import httpx
import psycopg

from agentops_client import Client
from tests.support.api_server import START_TIMEOUT, Server, make_user, sse_events
from tests.support.waiting import wait_until

BODY = {
    "workflow": "room_temperature",
    "thread_id": "t1",
    "input": {"question": "How warm is the living room?"},
}
FAST = {
    "AGENTOPS_SSE_POLL_SECONDS": 0.1,
    "AGENTOPS_SSE_HEARTBEAT_SECONDS": 0.3,
    "AGENTOPS_POLL_SECONDS": 0.1,
}


def read(
    client: httpx.Client,
    path: str,
    *,
    count: int | None = None,
    until_heartbeat: bool = False,
    **headers,
) -> tuple[list[dict], bool]:
    """Read events from the stream until ``count`` events, a heartbeat (if asked) or
    the end of the stream; returns them and whether a heartbeat was seen."""
    events, heartbeat = [], False
    with client.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for item in sse_events(response):
            if "comment" in item:
                heartbeat = True
                if until_heartbeat:
                    break
                continue
            events.append(item)
            if count is not None and len(events) >= count:
                break
    return events, heartbeat


def test_it_replays_and_follows_without_gaps_or_repeats_across_a_server_restart(deployment_factory):
    deployment = deployment_factory("sqlite", extra_env=FAST)
    token = make_user(deployment, "alice")
    server = Server(deployment)
    auth = {"Authorization": f"Bearer {token}"}
    client = httpx.Client(base_url=server.url, headers=auth, timeout=60)
    api = Client(server.url, token, retry_backoff=0.2)
    run = api.start_run(
        BODY["workflow"], thread_id=BODY["thread_id"], input=BODY["input"], idempotency_key="k1"
    )
    stream = f"/api/v1/runs/{run.id}/stream"

    # No worker yet: the first events are replayed, then the idle stream sends heartbeats.
    first, heartbeat = read(client, stream, until_heartbeat=True)
    assert heartbeat
    assert [(int(e["id"]), e["event"]) for e in first] == [
        (1, "run.created"),
        (2, "message.created"),
        (3, "step.scheduled"),
    ]
    assert (
        first[0]["data"]["seq"] == 1
        and first[0]["data"]["payload"]["workflow"] == "room_temperature"
    )

    # "Last-Event-ID: 3 starts at event 4", live, while a worker moves the run. The
    # server crashes mid-stream and comes back on its port while the run moves on; the
    # client reconnects with its last id and goes on.
    deployment.popen("worker", extra_env={"AGENTOPS_SIM_WORD_SECONDS": 0.2})
    followed, crashed_after = [], 0
    for event in api.stream_events(run, last_event_id=3, reconnect_timeout=START_TIMEOUT + 30):
        followed.append(event)
        if len(followed) == 4:
            crashed_after = event.seq
            server.kill()
            server = Server(deployment, port=server.port)
    assert followed[0].seq == 4
    assert crashed_after and followed[-1].seq > crashed_after

    received = [int(e["id"]) for e in first] + [e.seq for e in followed]
    log = api.events(run, limit=1000)
    assert log.run_status == "SUCCEEDED"
    assert received == [e.seq for e in log.items] == list(range(1, log.last_seq + 1))
    assert [e["event"] for e in first] + [e.type for e in followed] == [e.type for e in log.items]
    assert followed[-1].type == "run.succeeded"

    # A reconnect after the end replays the rest and ends at once (header or query form).
    client = httpx.Client(base_url=server.url, headers=auth, timeout=60)
    tail, _ = read(client, stream, **{"Last-Event-ID": str(log.last_seq - 1)})
    assert [int(e["id"]) for e in tail] == [log.last_seq]
    tail, _ = read(client, f"{stream}?last_event_id={log.last_seq - 2}")
    assert [int(e["id"]) for e in tail] == [log.last_seq - 1, log.last_seq]
    assert [e.seq for e in api.stream_events(run, last_event_id=log.last_seq - 1)] == [log.last_seq]


def test_it_refuses_the_stream_without_a_token_or_for_another_owner(deployment_factory):
    deployment = deployment_factory("sqlite", extra_env=FAST)
    alice, bob = make_user(deployment, "alice"), make_user(deployment, "bob")
    server = Server(deployment)
    run_id = httpx.post(
        server.url + "/api/v1/runs", json=BODY, headers={"Authorization": f"Bearer {bob}"}
    ).json()["id"]
    path = f"{server.url}/api/v1/runs/{run_id}/stream"
    assert httpx.get(path).status_code == 401
    response = httpx.get(path, headers={"Authorization": f"Bearer {alice}"})
    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    # EventSource clients may pass the token as a query parameter.
    with httpx.stream("GET", f"{path}?access_token={bob}") as response:
        assert response.status_code == 200


def test_it_holds_no_database_connection_for_idle_streams(deployment_factory):
    # Polls once a second, each a few milliseconds long: a held connection would show in
    # every sample, short ones almost never.
    deployment = deployment_factory("postgres", extra_env={**FAST, "AGENTOPS_SSE_POLL_SECONDS": 1})
    token = make_user(deployment, "alice")
    server = Server(deployment)
    auth = {"Authorization": f"Bearer {token}"}
    run_id = httpx.post(server.url + "/api/v1/runs", json=BODY, headers=auth).json()["id"]
    streams = 5
    with contextlib.ExitStack() as stack:
        for _ in range(streams):
            client = stack.enter_context(
                httpx.Client(base_url=server.url, headers=auth, timeout=60)
            )
            response = stack.enter_context(client.stream("GET", f"/api/v1/runs/{run_id}/stream"))
            for item in sse_events(response):
                if "comment" in item:
                    break  # replayed, now idle: only heartbeats from here on
        # Every open stream is idle now; sample the server's sessions on the database.
        wait_until(
            lambda: server_connections(deployment) == 0,
            what="a sample without a server session on the database",
            timeout=10,
            interval=0.05,
        )


def server_connections(deployment) -> int:
    """Sessions on the deployment's database other than this one."""
    with psycopg.connect(deployment.database_url, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        ).fetchone()[0]
