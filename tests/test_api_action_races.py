"""Concurrent state-changing API actions through a real uvicorn server, on the embedded
SQLite default and on PostgreSQL: 10 requests with the run's ETag at the same moment,
per action. One wins (200), the others get 409 ``run_changed``, none a 500, and the
action happens once; 10 requests with one Idempotency-Key all get the first response."""

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.api_server import Server
from tests.support.deployment_runs import shell_json

CLIENTS = 10
SCENARIOS = [
    "running",
    "retries_exhausted",
    "retries_exhausted",
    "unknown",
    "budget",
    "waiting_approval",
    "budget",
]

SEED = f"""
from django.contrib.auth.models import User
from runs.models import Approval
from runs.console.roles import setup_roles
from lab.demo_seed import Seeder
from runs.models import Step
from apitokens.services import create_token
report = Seeder({len(SCENARIOS)}, seed=3, scenarios={SCENARIOS!r}).seed()
groups = setup_roles()
desk = User.objects.create_user("desk", is_staff=True)
desk.groups.add(groups["operator"], groups["approver"], groups["viewer"])
_, token = create_token(desk)
ids = report.scenarios
unknown = ids["unknown"][0]
print(json.dumps({{
    "token": token,
    "ids": {{k: [str(v) for v in vs] for k, vs in ids.items()}},
    "unknown_step": Step.objects.get(run_id=unknown, status="UNKNOWN").name,
    "approval": Approval.objects.get(run_id=ids["waiting_approval"][0], status="PENDING").pk,
}}))
"""

COUNT = """
from runs.models import Event, Run
run = Run.objects.get(pk={run_id!r})
print(json.dumps({{"events": Event.objects.filter(run=run, type={type_!r}).count(),
                   "generation": run.generation, "status": run.status}}))
"""


def fire(server: Server, token: str, path: str, body: dict, headers: dict) -> list[httpx.Response]:
    """POST ``body`` to ``path`` from CLIENTS connections released at the same moment."""
    barrier = threading.Barrier(CLIENTS)

    def one(_):
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=120) as client:
            client.get("/api/v1/runs?limit=1")  # connect and authenticate first
            barrier.wait(timeout=120)
            return client.post(path, json=body, headers=headers)

    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(one, range(CLIENTS)))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_it_lets_one_of_10_concurrent_requests_act_per_action(deployment_factory, backend):
    deployment = deployment_factory(backend)
    seeded = shell_json(deployment, SEED)
    ids, token = seeded["ids"], seeded["token"]
    server = Server(deployment)
    client = httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )
    resume_run = ids["retries_exhausted"][1]
    checkpoint = next(
        c["name"]
        for c in client.get(f"/api/v1/runs/{resume_run}/checkpoints").json()
        if c["resumable"]
    )
    actions = [
        # (run, path, body, the event the action writes once)
        (ids["running"][0], "cancel", {"reason": "stop"}, "run.cancel_requested"),
        (
            resume_run,
            "resume",
            {"checkpoint": checkpoint, "reason": "again"},
            "run.resumed_from_checkpoint",
        ),
        (ids["retries_exhausted"][0], "retry", {"reason": "back"}, "step.retry_requested"),
        (
            ids["unknown"][0],
            f"steps/{seeded['unknown_step']}/resolve",
            {"outcome": "done", "evidence": "the lamp reads 70%"},
            "unknown.resolved",
        ),
        (ids["budget"][0], "budget", {"reason": "pay", "add_model_calls": 5}, "budget.raised"),
        (
            ids["waiting_approval"][0],
            f"/api/v1/approvals/{seeded['approval']}/decide",
            {"decision": "approve"},
            "approval.approved",
        ),
    ]
    for run_id, action, body, event_type in actions:
        path = action if action.startswith("/") else f"/api/v1/runs/{run_id}/{action}"
        etag = client.get(f"/api/v1/runs/{run_id}").headers["ETag"]
        responses = fire(server, token, path, body, {"If-Match": etag})
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [200] + [409] * (CLIENTS - 1), (action, [r.text for r in responses])
        assert {r.json()["code"] for r in responses if r.status_code == 409} == {"run_changed"}
        [winner] = [r for r in responses if r.status_code == 200]
        assert winner.headers["ETag"] != etag
        after = shell_json(deployment, COUNT.format(run_id=run_id, type_=event_type))
        assert after["events"] == 1, (action, after)

    # One Idempotency-Key: every duplicate gets the first response, the budget grows once.
    run_id = ids["budget"][1]
    etag = client.get(f"/api/v1/runs/{run_id}").headers["ETag"]
    responses = fire(
        server,
        token,
        f"/api/v1/runs/{run_id}/budget",
        {"reason": "pay once", "add_tool_calls": 3},
        {"If-Match": etag, "Idempotency-Key": "raise-1"},
    )
    assert [r.status_code for r in responses] == [200] * CLIENTS, [r.text for r in responses]
    assert len({r.text for r in responses}) == 1
    assert sorted(r.headers.get("Idempotent-Replayed", "") for r in responses) == [""] + [
        "true"
    ] * (CLIENTS - 1)
    after = shell_json(deployment, COUNT.format(run_id=run_id, type_="budget.raised"))
    assert after["events"] == 1
