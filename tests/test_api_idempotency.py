"""Idempotent run creation under real concurrency: 20 requests with one key at the same
moment against PostgreSQL through a real uvicorn server create exactly one run."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentops_client import ApiError, Client
from tests.support.api_server import Server, make_user

START = {
    "workflow": "room_temperature",
    "thread_id": "t1",
    "input": {"question": "How warm is the living room?"},
}
CLIENTS = 20


def test_it_creates_one_run_for_20_concurrent_requests_with_one_key(deployment_factory):
    deployment = deployment_factory("postgres")
    token = make_user(deployment, "alice")
    server = Server(deployment)
    barrier = threading.Barrier(CLIENTS)

    def create(_):
        # No retries: each of the 20 requests is answered once, as sent.
        with Client(server.url, token, timeout=120, retries=0) as client:
            client.list_runs()  # connect (and authenticate) before the barrier
            barrier.wait(timeout=120)
            return client.start_run(**START, idempotency_key="same-key")

    with ThreadPoolExecutor(CLIENTS) as pool:
        runs = list(pool.map(create, range(CLIENTS)))

    assert sorted(r.replayed for r in runs) == [False] + [True] * (CLIENTS - 1)
    ids = {r.id for r in runs}
    assert len(ids) == 1
    with Client(server.url, token) as client:
        listing = client.list_runs()
        assert listing.count == 1 and listing.items[0].id in ids
        # The same key with another body is refused, and creates nothing.
        with pytest.raises(ApiError) as other:
            client.start_run(**{**START, "thread_id": "t2"}, idempotency_key="same-key")
        assert (other.value.status, other.value.code) == (422, "idempotency_key_reused")
        assert client.list_runs().count == 1
        assert [m.role for m in client.messages("t1")] == ["user"]
