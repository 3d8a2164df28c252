"""Signals over HTTP: ``POST /api/v1/runs/{id}/signals/{name}`` (token, permission,
Idempotency-Key) and the signed webhook ``POST /api/v1/hooks/{hook}`` (no token; a
wrong, missing or stale signature is 401 and audited). A real ``serve`` process and a
worker on PostgreSQL + Redis."""

import json
import time

import httpx

from agentops_client import Client
from runs.api.signals import SIGNATURE_HEADER, sign
from tests.support.api_server import Server, make_user
from tests.support.deployment_runs import db_rows
from tests.support.waiting import wait_until

SECRET = "s3cret-for-tests"
HOOKS = {"payments": {"secret": SECRET, "signal": "payment", "field": "order"}}


def waiting_run(d, order: str) -> str:
    run_id = d.call(
        "runs", "start", "order_followup", "--thread", order,
        "--input", json.dumps({"order": order, "delay_s": 0}),
    ).strip()  # fmt: skip
    d.manage("worker", "--burst", timeout=180, check=True)
    assert db_rows(d, "SELECT status FROM runs_run WHERE id = %s", (run_id,)) == [
        ("WAITING_EXTERNAL",)
    ]
    return run_id


def received(d, run_id: str) -> int:
    rows = db_rows(
        d,
        "SELECT count(*) FROM runs_event WHERE run_id = %s AND type = 'signal.received'",
        (run_id,),
    )
    return rows[0][0]


def test_the_api_delivers_once_per_key_checks_the_payload_and_the_permission(
    deployment_factory,
):
    d = deployment_factory("postgres", {"AGENTOPS_SIGNAL_HOOKS": json.dumps(HOOKS)})
    operator = make_user(d, "op", staff=True, perms=("runs.view_run", "runs.operate_run"))
    viewer = make_user(d, "viewer", staff=True, perms=("runs.view_run",))
    run_id = waiting_run(d, "api-1")
    server = Server(d)
    url = f"{server.url}/api/v1/runs/{run_id}/signals/payment"
    auth = {"Authorization": f"Bearer {operator}"}

    bad = httpx.post(url, json={"amount": -1}, headers=auth, timeout=30)
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_input"
    assert "payload.amount" in bad.json()["errors"]
    json_type = {**auth, "Content-Type": "application/json"}
    assert httpx.post(url, content=b"{nope", headers=json_type, timeout=30).status_code == 400
    forbidden = httpx.post(
        url, json={"amount": 5}, headers={"Authorization": f"Bearer {viewer}"}, timeout=30
    )
    assert forbidden.status_code == 403
    unknown = httpx.post(f"{server.url}/api/v1/runs/{run_id}/signals/x", headers=auth, timeout=30)
    assert unknown.status_code == 422 and unknown.json()["code"] == "unknown_signal"
    assert received(d, run_id) == 0

    api = Client(server.url, operator)
    first = api.signal(run_id, "payment", {"amount": 5}, idempotency_key="pay-77")
    again = api.signal(run_id, "payment", {"amount": 5}, idempotency_key="pay-77")
    assert first == again and (first.replayed, again.replayed) == (False, True)
    assert first.consumed is True and first.request_id == "pay-77"
    assert first.run_status == "RUNNING"
    assert received(d, run_id) == 1

    d.manage("worker", "--burst", timeout=180, check=True)
    done = httpx.post(url, json={"amount": 5}, headers=auth, timeout=30)
    assert done.status_code == 409 and done.json()["code"] == "run_terminal"
    server.kill()


def test_the_webhook_takes_signed_calls_once_and_refuses_and_audits_the_rest(
    deployment_factory,
):
    d = deployment_factory("postgres", {"AGENTOPS_SIGNAL_HOOKS": json.dumps(HOOKS)})
    run_id = waiting_run(d, "order-9")
    server = Server(d)
    url = f"{server.url}/api/v1/hooks/payments"
    body = json.dumps({"order": "order-9", "amount": 20}).encode()

    for header in (
        None,
        sign("wrong-secret", body),
        sign(SECRET, body, int(time.time()) - 3600),
        sign(SECRET, b'{"order": "order-9", "amount": 2000}'),
    ):
        headers = {"Content-Type": "application/json"}
        if header is not None:
            headers[SIGNATURE_HEADER] = header
        refused = httpx.post(url, content=body, headers=headers, timeout=30)
        assert refused.status_code == 401, refused.text
        assert refused.json()["code"] == "invalid_signature"
    audited = db_rows(
        d, "SELECT actor, channel, status_code, code FROM runs_refusedaction ORDER BY id"
    )
    assert audited == [("hook:payments", "webhook", 401, "invalid_signature")] * 4
    assert received(d, run_id) == 0

    signed = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(SECRET, body)}
    first = httpx.post(url, content=body, headers=signed, timeout=30)
    again = httpx.post(url, content=body, headers=signed, timeout=30)
    assert first.status_code == 200 and first.json()["consumed"] is True, first.text
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert received(d, run_id) == 1

    nobody = json.dumps({"order": "no-such-order", "amount": 1}).encode()
    missing = httpx.post(
        url,
        content=nobody,
        headers={"Content-Type": "application/json", SIGNATURE_HEADER: sign(SECRET, nobody)},
        timeout=30,
    )
    assert missing.status_code == 404 and missing.json()["code"] == "unknown_run"
    d.manage("worker", "--burst", timeout=180, check=True)
    wait_until(
        lambda: db_rows(d, "SELECT status FROM runs_run WHERE id = %s", (run_id,))
        == [("SUCCEEDED",)],
        what="the paid run to finish",
    )
    server.kill()
