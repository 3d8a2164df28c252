"""Idempotent run creation under real concurrency: 20 requests with one key at the same
moment against PostgreSQL through a real uvicorn server create exactly one run."""

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.apiserver import Server, make_user

BODY = {
    "workflow": "room_temperature",
    "thread_id": "t1",
    "input": {"question": "How warm is the living room?"},
}
CLIENTS = 20


def test_it_creates_one_run_for_20_concurrent_requests_with_one_key(deployment_factory):
    deployment = deployment_factory("postgres")
    token = make_user(deployment, "alice")
    server = Server(deployment)
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "same-key"}
    barrier = threading.Barrier(CLIENTS)

    def create(_):
        with httpx.Client(base_url=server.url, headers=headers, timeout=120) as client:
            client.get("/api/v1/runs")  # connect (and authenticate) before the barrier
            barrier.wait(timeout=120)
            return client.post("/api/v1/runs", json=BODY)

    with ThreadPoolExecutor(CLIENTS) as pool:
        responses = list(pool.map(create, range(CLIENTS)))

    assert sorted(r.status_code for r in responses) == [200] * (CLIENTS - 1) + [201], [
        r.text for r in responses if r.status_code not in (200, 201)
    ]
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1
    with httpx.Client(
        base_url=server.url, headers={"Authorization": headers["Authorization"]}
    ) as c:
        listing = c.get("/api/v1/runs").json()
        assert listing["count"] == 1 and listing["items"][0]["id"] in ids
        # The same key with another body is refused, and creates nothing.
        other = c.post(
            "/api/v1/runs",
            json={**BODY, "thread_id": "t2"},
            headers={"Idempotency-Key": "same-key"},
        )
        assert (other.status_code, other.json()["code"]) == (422, "idempotency_key_reused")
        assert c.get("/api/v1/runs").json()["count"] == 1
        messages = c.get("/api/v1/threads/t1/messages").json()
        assert [m["role"] for m in messages] == ["user"]
