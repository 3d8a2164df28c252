"""The run page's live feed: the run's events as unnamed Server-Sent Events for a
logged-in console user, served by a real uvicorn process, from the seq the page shows
to the run's end; refused without a login, without the view permission, for a bad seq
or an unknown run; a WSGI server answers 204 so the page keeps its refresh timer."""

import re
import uuid

import httpx
import pytest
from django.urls import reverse

from tests.support.api_server import Server, sse_events
from tests.support.in_process import (
    actors,
    clients,
    device_dir,
    fast_passwords,
    start_room_temperature,
)

__all__ = ["actors", "clients", "device_dir", "fast_passwords"]

FAST = {"AGENTOPS_SSE_POLL_SECONDS": 0.1, "AGENTOPS_SSE_HEARTBEAT_SECONDS": 0.3}
PASSWORD = "stream-test-pw"


def _console_user(deployment, name: str, group: str | None) -> None:
    deployment.shell(
        "from django.contrib.auth.models import User\n"
        "from runs.console.roles import setup_roles\n"
        f"u = User.objects.create_user({name!r}, password={PASSWORD!r})\n"
        f"if {group!r}:\n"
        f"    u.groups.add(setup_roles()[{group!r}])\n"
    )


def _logged_in(server: Server, name: str) -> httpx.Client:
    client = httpx.Client(base_url=server.url, timeout=60)
    form = client.get("/accounts/login/").text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    done = client.post(
        "/accounts/login/",
        data={"username": name, "password": PASSWORD, "csrfmiddlewaretoken": token},
    )
    assert done.status_code == 302, done.text
    return client


def test_it_follows_the_run_to_its_end_from_the_seq_the_page_shows(deployment_factory):
    d = deployment_factory("sqlite", extra_env=FAST)
    _console_user(d, "alice", "viewer")
    _console_user(d, "dave", None)
    run_id = d.call(
        "runs", "start", "room_temperature", "--thread", "S", "--input",
        '{"question": "How warm is the living room?"}',
    ).strip()  # fmt: skip
    server = Server(d)
    alice = _logged_in(server, "alice")
    page = alice.get(f"/runs/{run_id}/").text
    shown = re.search(r'data-run-stream="([^"]+)"', page).group(1).replace("&amp;", "&")
    assert shown == f"/runs/{run_id}/stream/?after=3"

    d.popen("worker")
    received = []
    with alice.stream("GET", shown) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for item in sse_events(response):
            if "comment" not in item:
                received.append(item)
    # Unnamed, so EventSource.onmessage sees them all; from seq 4 to the run's end.
    assert all("event" not in item for item in received)
    seqs = [int(item["id"]) for item in received]
    assert seqs == list(range(4, seqs[-1] + 1))
    assert received[-1]["data"]["type"] == "run.succeeded"
    # The finished run's page follows nothing.
    assert "data-run-stream" not in alice.get(f"/runs/{run_id}/").text

    stream = f"/runs/{run_id}/stream/"
    assert httpx.get(server.url + stream).status_code == 401
    dave = _logged_in(server, "dave")
    assert dave.get(stream).json()["code"] == "permission_denied"
    bad = alice.get(stream, params={"after": "-1"})
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_after")
    assert alice.get(f"/runs/{uuid.uuid4()}/stream/").status_code == 404


@pytest.mark.django_db
def test_a_wsgi_server_answers_204_and_the_page_keeps_its_timer(clients):
    run = start_room_temperature("T-wsgi")
    response = clients["alice"].get(reverse("console:run_stream", args=[run.pk]))
    assert response.status_code == 204
    page = clients["alice"].get(reverse("console:run", args=[run.pk])).content.decode()
    assert 'src="/static/runs/run_live.js"' in page
    assert 'hx-trigger="run-moved from:body, every 5s"' in page
