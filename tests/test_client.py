"""``agentops_client.Client`` against a real ``serve`` process: an idempotent start
answers the same run, refusals are ``ApiError`` with the API's code, a wait past its
deadline is ``WaitTimeout``, and a response lost on the way back is asked for again
only when the request is safe to repeat; a family of runs, a map step's branches and a
bulk replay come back typed; every field an endpoint answers has a place in the
client's documents. (Following a stream across a server crash:
tests/test_api_stream.py.)"""

import dataclasses
import subprocess
import sys
import typing
import uuid
from typing import Any

import httpx
import pytest

import agentops_client
from agentops_client import ApiError, Child, Client, Parent, WaitTimeout
from tests.support.api_server import Server, make_user

QUESTION = {"question": "How warm is the living room?"}
#: What a client application does not have: the server's packages and Django.
SERVER_PACKAGES = ("django", "ninja", "agentops", "runs", "approvals", "apitokens")


def test_the_client_imports_nothing_of_the_server():
    # A None entry in sys.modules makes importing that package fail.
    code = (
        "import sys\n"
        f"for name in {SERVER_PACKAGES!r}:\n"
        "    sys.modules[name] = None\n"
        "import agentops_client, agentops_client.client\n"
        "print(sorted({n.split('.')[0] for n, m in sys.modules.items() if m is not None}\n"
        f"             & set({SERVER_PACKAGES!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


#: The client's document of each response schema an endpoint answers; ``dict``: the
#: client hands the JSON object on as it is.
CLIENT_DOCUMENTS: dict[str, type] = {
    "ApprovalOut": agentops_client.Approval,
    "AttemptLogOut": agentops_client.AttemptLog,
    "BulkReplayOut": agentops_client.BulkReplay,
    "CheckpointOut": agentops_client.Checkpoint,
    "EventPage": agentops_client.EventPage,
    "MessageOut": agentops_client.Message,
    "ReplayOut": agentops_client.Replay,
    "ResumePreview": dict,
    "RunOut": agentops_client.Run,
    "RunPage": agentops_client.RunPage,
    "ScheduleOut": agentops_client.Schedule,
    "SignalOut": agentops_client.Delivery,
    "StepPage": agentops_client.StepPage,
    "TickResult": agentops_client.TickResult,
}


def test_every_field_the_api_answers_has_a_place_in_the_clients_documents():
    from runs.api.app import api

    schemas = api.get_openapi_schema()["components"]["schemas"]
    answered = set()
    for operations in api.get_openapi_schema()["paths"].values():
        for operation in operations.values():
            for status, response in operation["responses"].items():
                body = response.get("content", {}).get("application/json", {}).get("schema", {})
                if str(status).startswith("2") and _ref(body):
                    answered.add(_ref(body))
    assert answered == set(CLIENT_DOCUMENTS), "a response the client has no document for"
    missing = []
    for name in sorted(answered):
        missing += _missing_fields(schemas, name, CLIENT_DOCUMENTS[name])
    assert missing == []


def _ref(schema: dict[str, Any]) -> str | None:
    """The component a property's schema names, also as a list's items or an option."""
    for part in (schema, schema.get("items", {}), *schema.get("anyOf", ())):
        if "$ref" in part:
            return str(part["$ref"]).rsplit("/", 1)[1]
    return None


def _missing_fields(schemas: dict[str, Any], name: str, cls: type) -> list[str]:
    """``Schema.field`` of every property of the component ``name`` (and the documents
    nested in it) that the dataclass ``cls`` has no field for."""
    if not dataclasses.is_dataclass(cls):
        return []
    hints = typing.get_type_hints(cls)
    missing = []
    for field, schema in schemas[name]["properties"].items():
        if field not in hints:
            missing.append(f"{name}.{field}")
        elif (nested := _ref(schema)) is not None:
            inner = [a for a in typing.get_args(hints[field]) if a is not type(None)]
            missing += _missing_fields(schemas, nested, inner[0] if inner else hints[field])
    return missing


class Refuses(httpx.BaseTransport):
    """The network, as a test sees it when nothing may be sent: counts the attempts."""

    def __init__(self) -> None:
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return httpx.Response(500)


def test_ids_and_waits_that_are_not_valid_are_refused_before_anything_is_sent():
    transport = Refuses()
    with Client("http://127.0.0.1:9", "token", transport=transport) as api:
        run_id = str(uuid.uuid4())
        for bad in (run_id + "/events", run_id + "?x=1", "../../metrics", "", "abc"):
            with pytest.raises(ValueError, match="not a run id"):
                api.get_run(bad)
            with pytest.raises(ValueError, match="not a run id"):
                api.cancel(bad, reason="r", if_match='"e"')
        for step, attempt in ((0, 1), (1, -1), ("1/x", 1), (True, 1)):
            with pytest.raises(ValueError):
                api.attempt_log(run_id, step, attempt)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="approval id"):
            api.decide("7/x", "approve", if_match='"e"')  # type: ignore[arg-type]
        for timeout, interval in ((-5, 0.5), (0, 0.5), (1, 0)):
            with pytest.raises(ValueError, match="positive"):
                api.wait(run_id, timeout=timeout, poll_interval=interval)
    assert transport.sent == 0


class LosesResponses(httpx.BaseTransport):
    """The network, except that the next ``losses`` responses are read and then lost,
    as when a connection drops after the server acted and before its answer arrived,
    and the next ``busy`` requests are answered 503 ``database_busy`` (as the server
    answers when its database is busy) without reaching the server. ``sent`` counts the
    requests that reached the server."""

    def __init__(self) -> None:
        self.network = httpx.HTTPTransport()
        self.losses = 0
        self.busy = 0
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.busy:
            self.busy -= 1
            body = {"code": "database_busy", "message": "busy", "errors": {}}
            return httpx.Response(503, json=body, headers={"Retry-After": "0"})
        response = self.network.handle_request(request)
        self.sent += 1
        if self.losses:
            self.losses -= 1
            response.read()
            response.close()
            raise httpx.ReadError("connection reset by peer", request=request)
        return response

    def close(self) -> None:
        self.network.close()


def test_the_client_starts_once_raises_typed_errors_waits_and_retries_what_is_safe(
    deployment_factory,
):
    deployment = deployment_factory("sqlite")
    token = make_user(deployment, "alice")
    server = Server(deployment)
    network = LosesResponses()
    api = Client(server.url, token, transport=network, retry_backoff=0.01)

    first = api.start_run("room_temperature", thread_id="t1", input=QUESTION, idempotency_key="k1")
    again = api.start_run("room_temperature", thread_id="t1", input=QUESTION, idempotency_key="k1")
    assert (first.replayed, again.replayed) == (False, True)
    assert again == first and first.status == "PENDING" and first.next_step == "plan"
    assert api.list_runs(thread_id="t1").count == 1

    with pytest.raises(ApiError) as reused:
        api.start_run("room_temperature", thread_id="t2", input=QUESTION, idempotency_key="k1")
    assert (reused.value.status, reused.value.code) == (422, "idempotency_key_reused")
    with pytest.raises(ApiError) as unknown:
        api.start_run("no_such_workflow", thread_id="t1", input=QUESTION)
    assert (unknown.value.status, unknown.value.code) == (422, "unknown_workflow")
    assert "workflow" in unknown.value.errors
    with pytest.raises(ApiError) as missing:
        api.get_run(str(uuid.uuid4()))
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    with pytest.raises(ApiError) as unauthorized:
        Client(server.url, "ao_nope").list_runs()
    assert (unauthorized.value.status, unauthorized.value.code) == (401, "unauthorized")

    # An action sent with the ETag of a run that has moved on since changes nothing.
    cancelled = api.cancel(api.start_run("room_temperature", thread_id="t3", input=QUESTION),
                           reason="closed the tab")  # fmt: skip
    with pytest.raises(ApiError) as stale:
        api.cancel(first, reason="again", if_match=cancelled.etag)
    assert (stale.value.status, stale.value.code) == (409, "run_changed")

    with pytest.raises(WaitTimeout) as late:
        api.wait(first, {"SUCCEEDED"}, timeout=0.3, poll_interval=0.1)
    assert late.value.run is not None and late.value.run.status == "PENDING"

    # A lost answer to a keyed start is asked for again: the server replays it.
    network.losses, network.sent = 1, 0
    keyed = api.start_run("room_temperature", thread_id="t4", input=QUESTION, idempotency_key="k4")
    assert network.sent == 2 and keyed.replayed
    # A lost answer to a GET is asked for again too.
    network.losses, network.sent = 1, 0
    assert api.get_run(keyed).id == keyed.id and network.sent == 2
    # Without a key nobody can tell whether the start was applied: it is not sent again.
    network.losses, network.sent = 1, 0
    with pytest.raises(httpx.ReadError):
        api.start_run("room_temperature", thread_id="t5", input=QUESTION)
    assert network.sent == 1
    assert [api.list_runs(thread_id=t).count for t in ("t4", "t5")] == [1, 1]
    # A busy database answers 503: a GET asks again, a start without a key does not.
    network.busy, network.sent = 1, 0
    assert api.get_run(keyed).id == keyed.id and network.sent == 1
    network.busy, network.sent = 1, 0
    with pytest.raises(ApiError) as busy:
        api.start_run("room_temperature", thread_id="t6", input=QUESTION)
    assert (busy.value.status, busy.value.code, network.sent) == (503, "database_busy", 0)

    deployment.manage("worker", "--burst", timeout=180, check=True)
    done = api.wait(first, timeout=60)
    assert done.status == "SUCCEEDED" and done.terminal
    assert [m.role for m in api.messages("t1")][-1] == "assistant"
    api.close()
    server.kill()


def test_the_client_reads_children_branches_and_replays_in_bulk(deployment_factory):
    deployment = deployment_factory("sqlite")
    token = make_user(deployment, "olga", staff=True, perms=("runs.operate_run",))
    server = Server(deployment)
    api = Client(server.url, token)
    parent = api.start_run("triage_demo", thread_id="f1", input={"tickets": 2, "hold_s": 0})
    fan = api.start_run("fanout_demo", thread_id="f2", input={"items": 2, "delay_s": 0})
    for thread in ("c1", "c2"):
        api.cancel(api.start_run("room_temperature", thread_id=thread, input=QUESTION),
                   reason="closed the tab")  # fmt: skip
    deployment.manage("worker", "--burst", timeout=180, check=True)

    done = api.wait(parent, timeout=60)
    assert (done.status, done.parent, done.parent_run, done.children_total) == (
        "SUCCEEDED", None, None, 2
    )  # fmt: skip
    assert [(type(c), c.workflow, c.step, c.position, c.status) for c in done.children] == [
        (Child, "triage_ticket", "triage", n, "SUCCEEDED") for n in range(2)
    ]
    kid = api.get_run(done.children[1].id)
    assert kid.parent_run == parent.id
    assert kid.parent == Parent(run=parent.id, step="triage", position=1, detached=False)
    listed = api.list_runs(parent=parent.id[:8])
    assert listed.count == 2
    assert {r.id for r in listed.items} == {c.id for c in done.children}
    assert {r.parent_run for r in listed.items} == {parent.id}
    with pytest.raises(ApiError) as too_long:
        api.list_runs(parent="f" * 37)
    assert too_long.value.status == 422 and "parent" in too_long.value.errors

    # The map step's branches name it and their place in its items, on both faces.
    fanned = api.wait(fan, timeout=60)
    [fetch] = [s for s in fanned.steps if s.name == "fetch" and s.branch_of is None]
    for steps in (fanned.steps, api.steps(fan).items):
        branches = [s for s in steps if s.branch_of is not None]
        assert [(s.branch_of, s.position) for s in branches] == [(fetch.id, 0), (fetch.id, 1)]
        assert all(s.position is None for s in steps if s.branch_of is None)

    # A dry run previews and creates nothing; the same key again answers the first answer.
    dry = api.replay_runs(reason="preview", status="CANCELLED", dry_run=True)
    assert dry.dry_run and dry.created == [] and len(dry.previews) == 2
    first = api.replay_runs(reason="tab reopened", status="CANCELLED", rate=100,
                            idempotency_key="bulk-1")  # fmt: skip
    again = api.replay_runs(reason="tab reopened", status="CANCELLED", rate=100,
                            idempotency_key="bulk-1")  # fmt: skip
    assert (first.replayed, again.replayed, again == first) == (False, True, True)
    assert len(first.created) == 2 and first.skipped == []
    replays = api.list_runs(is_replay=True)
    assert replays.count == 2
    assert {r.id for r in replays.items} == {c.replay for c in first.created}
    assert {r.replay_of for r in replays.items} == {c.run for c in first.created}
    with pytest.raises(ApiError) as refused:
        api.replay_runs(reason="x", rate=0)
    assert (refused.value.status, refused.value.code) == (422, "invalid_rate")
    api.close()
    server.kill()
