"""``Client``: the AgentOps JSON API (``/api/v1``) over httpx, synchronous.

Every method sends one request (plus the retries below, and a read of the run's ETag
when an action is given a run id instead of a ``Run``) and answers a typed document
from ``agentops_client.models``, or raises ``ApiError`` with the HTTP status and the
API's machine-readable ``code``.

Retries: a request that is safe to repeat (a GET, or a POST sent with an idempotency
key, which the server answers once and replays after) is retried when the connection
fails (``httpx.TransportError``) and when the server answers 503 (database busy) or
409 ``request_in_progress``, up to ``retries`` times with a growing pause (the
``Retry-After`` the server sends, at most ``MAX_RETRY_AFTER`` seconds). Any other
request is sent once: a connection lost after sending it leaves unknown whether it was
applied, and only an idempotency key makes asking again safe.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from agentops_client.errors import ApiError, StreamError, WaitTimeout
from agentops_client.models import (
    TERMINAL_STATUSES,
    Approval,
    AttemptLog,
    BulkReplay,
    Checkpoint,
    Delivery,
    Event,
    EventPage,
    Message,
    Replay,
    Run,
    RunPage,
    RunSummary,
    Schedule,
    StepPage,
    TickResult,
    build,
)

T = TypeVar("T")

#: The longest pause (seconds) a retry takes on a server's ``Retry-After``.
MAX_RETRY_AFTER = 10.0
#: Event types that end a run: after one, a stream that ends cleanly is over.
TERMINAL_EVENTS = frozenset(f"run.{status.lower()}" for status in TERMINAL_STATUSES)
_RETRIED_STATUSES = {503}
_RETRIED_CODES = {"request_in_progress"}

RunRef = Run | RunSummary | str


def _run_id(run: RunRef) -> str:
    """The id of ``run`` for a URL path. Raises ``ValueError`` for text that is not a
    run id (a UUID), so nothing else is ever spliced into the path."""
    if isinstance(run, RunSummary):
        return run.id
    try:
        return str(uuid.UUID(str(run)))
    except ValueError:
        raise ValueError(f"not a run id: {run!r}") from None


def _number(value: int, what: str) -> int:
    """``value`` as a positive integer path segment (a step or approval id, an attempt
    number). Raises ``ValueError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"not a {what}: {value!r}")
    return value


def _query(params: Mapping[str, Any]) -> dict[str, str | int]:
    """Query parameters as the API reads them: ``None`` left out, booleans as
    ``true``/``false``, times in ISO 8601."""
    out: dict[str, str | int] = {}
    for name, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, datetime):
            out[name] = value.isoformat()
        else:
            out[name] = value
    return out


class Client:
    """A connection to one AgentOps server as one API token's user.

    ``base_url`` is the server (``http://127.0.0.1:8000``; a URL ending in ``/api/v1``
    is taken as it is), ``token`` an API token (``manage.py api_token create``).
    ``timeout`` (seconds) bounds each request; ``retries`` and ``retry_backoff``
    (seconds, doubled per retry) apply to requests that are safe to repeat (see the
    module). ``transport`` replaces httpx's network transport (tests, proxies).
    Use it as a context manager, or call ``close()``.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        retry_backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
    ):
        root = base_url.rstrip("/")
        if not root.endswith("/api/v1"):
            root += "/api/v1"
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.timeout = timeout
        self._http = httpx.Client(
            base_url=root,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the one request path ------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        has_body: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """Send a request and return its 2xx response; raises ``ApiError`` for any other
        status and ``httpx.TransportError`` when the connection fails for good."""
        sent_headers = {k: v for k, v in (headers or {}).items() if v is not None}
        content = None
        if has_body:
            content = json.dumps(body).encode()
            sent_headers["Content-Type"] = "application/json"
        repeatable = method == "GET" or "Idempotency-Key" in sent_headers
        attempt = 0
        while True:
            pause = self.retry_backoff * 2**attempt
            try:
                response = self._http.request(
                    method,
                    path,
                    params=_query(params or {}),
                    content=content,
                    headers=sent_headers,
                )
            except httpx.TransportError:
                if not repeatable or attempt >= self.retries:
                    raise
            else:
                if response.is_success:
                    return response
                error = ApiError.from_response(response)
                busy = error.status in _RETRIED_STATUSES or error.code in _RETRIED_CODES
                if not (busy and repeatable and attempt < self.retries):
                    raise error
                pause = max(pause, _retry_after(error.headers))
            attempt += 1
            time.sleep(pause)

    def _get(self, cls: type[T], path: str, **params: Any) -> T:
        return build(cls, self._send("GET", path, params=params).json())

    def _get_list(self, cls: type[T], path: str, **params: Any) -> list[T]:
        return [build(cls, item) for item in self._send("GET", path, params=params).json()]

    def _etag(self, run: RunRef, if_match: str | None) -> str:
        """The ``If-Match`` of an action: the one given, else the ETag of the ``Run``
        given (the state the caller decided on), else the run's current one (a read)."""
        if if_match is not None:
            return if_match
        if isinstance(run, RunSummary):
            return run.etag
        return self._send("GET", f"/runs/{run}").headers["ETag"]

    def _act(
        self,
        run: RunRef,
        path: str,
        body: dict[str, Any],
        *,
        if_match: str | None,
        idempotency_key: str | None,
    ) -> Run:
        response = self._send(
            "POST",
            path,
            body=body,
            has_body=True,
            headers=_action_headers(self._etag(run, if_match), idempotency_key),
        )
        return _run(response)

    # -- runs ---------------------------------------------------------------------

    def start_run(
        self,
        workflow: str,
        *,
        thread_id: str,
        input: dict[str, Any],
        budget: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Run:
        """Start ``workflow`` on the caller's thread ``thread_id`` with ``input`` (a JSON
        object the workflow checks). ``budget``: ``{"model_calls": int, "tool_calls":
        int, "tokens": int, "cost_usd": "0.10"}``, each optional. With an
        ``idempotency_key`` (1..200 printable ASCII characters) the same call again
        answers the first response (``Run.replayed`` true, the run as it was created)
        and creates nothing, so it is retried after a lost connection. Raises
        ``ApiError``: 422 ``unknown_workflow``, ``invalid_input``,
        ``idempotency_key_reused`` (same key, other body), 429 ``throttled``."""
        body: dict[str, Any] = {"workflow": workflow, "thread_id": thread_id, "input": input}
        if budget is not None:
            body["budget"] = budget
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        return _run(self._send("POST", "/runs", body=body, has_body=True, headers=headers))

    def get_run(self, run: RunRef) -> Run:
        """The run as it is now (404 ``not_found`` for a run the token may not see)."""
        return _run(self._send("GET", f"/runs/{_run_id(run)}"))

    def list_runs(
        self,
        *,
        status: str | None = None,
        workflow: str | None = None,
        version: int | None = None,
        thread_id: str | None = None,
        q: str | None = None,
        stuck: bool | None = None,
        has_unknown: bool | None = None,
        is_replay: bool | None = None,
        was_replayed: bool | None = None,
        parent: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        updated_after: datetime | None = None,
        updated_before: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> RunPage:
        """The runs the token sees that match every filter given, newest first, ``limit``
        (1..200) from ``offset``; ``q`` is a run id prefix, thread id or goal text,
        ``parent`` a run's id or a prefix of it (up to 36 characters): its child runs.
        Raises ``ApiError`` 422 ``invalid_request`` for a filter out of range."""
        return self._get(
            RunPage,
            "/runs",
            status=status,
            workflow=workflow,
            version=version,
            thread_id=thread_id,
            q=q,
            stuck=stuck,
            has_unknown=has_unknown,
            is_replay=is_replay,
            was_replayed=was_replayed,
            parent=parent,
            created_after=created_after,
            created_before=created_before,
            updated_after=updated_after,
            updated_before=updated_before,
            limit=limit,
            offset=offset,
        )

    def events(self, run: RunRef, *, after: int = 0, limit: int = 100) -> EventPage:
        """Up to ``limit`` (1..1000) of the run's events with ``seq > after``."""
        return self._get(EventPage, f"/runs/{_run_id(run)}/events", after=after, limit=limit)

    def steps(self, run: RunRef, *, after_seq: int = 0, limit: int = 100) -> StepPage:
        """Up to ``limit`` of the run's steps with ``seq > after_seq``, with attempts."""
        return self._get(StepPage, f"/runs/{_run_id(run)}/steps", after_seq=after_seq, limit=limit)

    def attempt_log(self, run: RunRef, step_id: int, attempt: int) -> AttemptLog:
        """What ``attempt`` of the step with id ``step_id`` (a ``Step.id``) logged and
        printed. 404 ``not_found`` while it runs, when its worker died before storing
        it, or for another run's step."""
        return self._get(
            AttemptLog,
            f"/runs/{_run_id(run)}/steps/{_number(step_id, 'step id')}"
            f"/attempts/{_number(attempt, 'attempt')}/log",
        )

    def messages(
        self,
        thread_id: str,
        *,
        include_superseded: bool = False,
        after_seq: int = 0,
        limit: int = 200,
    ) -> list[Message]:
        """The thread's final and draft messages in order (404 for a thread the caller
        does not own)."""
        return self._get_list(
            Message,
            f"/threads/{_path(thread_id)}/messages",
            include_superseded=include_superseded,
            after_seq=after_seq,
            limit=limit,
        )

    def checkpoints(self, run: RunRef, *, after: int = 0, limit: int = 100) -> list[Checkpoint]:
        """The run's checkpoints, oldest first, with ``id > after``."""
        return self._get_list(
            Checkpoint, f"/runs/{_run_id(run)}/checkpoints", after=after, limit=limit
        )

    def resume_preview(
        self, run: RunRef, checkpoint: str, *, reexecute: bool = False
    ) -> dict[str, Any]:
        """What resuming from ``checkpoint`` would do (``steps_to_rerun``,
        ``operations_reused``, ``operations_may_repeat``, ...); changes nothing. 422
        ``unknown_checkpoint``."""
        response = self._send(
            "GET",
            f"/runs/{_run_id(run)}/resume-preview",
            params={"checkpoint": checkpoint, "reexecute": reexecute},
        )
        return dict(response.json())

    def wait(
        self,
        run: RunRef,
        statuses: frozenset[str] | set[str] = TERMINAL_STATUSES,
        *,
        timeout: float = 60.0,
        poll_interval: float = 0.5,
    ) -> Run:
        """Read the run every ``poll_interval`` seconds until its status is one of
        ``statuses`` (default: finished) and return it. Raises ``WaitTimeout`` (with the
        run as last read) after ``timeout`` seconds, ``ApiError`` if it cannot be read,
        ``ValueError`` for a ``timeout`` or ``poll_interval`` that is not positive."""
        if not timeout > 0 or not poll_interval > 0:
            raise ValueError("timeout and poll_interval must be positive seconds")
        deadline = time.monotonic() + timeout
        while True:
            current = self.get_run(run)
            if current.status in statuses:
                return current
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(
                    f"run {current.id} is {current.status}, not {'/'.join(sorted(statuses))}, "
                    f"after {timeout:g} s",
                    current,
                )
            time.sleep(min(poll_interval, left))

    # -- actions (conditional on the run's ETag) ---------------------------------

    def cancel(
        self,
        run: RunRef,
        *,
        reason: str,
        if_match: str | None = None,
        idempotency_key: str | None = None,
    ) -> Run:
        """Ask the run to cancel (CANCEL_REQUESTED, CANCELLED at the running step's next
        safe point). Every action takes ``run`` as a ``Run`` (its ``etag`` is sent as
        ``If-Match``: 409 ``run_changed`` if the run moved since) or as an id (its
        current ETag is read first), or an explicit ``if_match``; and an optional
        ``idempotency_key`` (the same call again replays the first answer). 409
        ``run_terminal`` for a finished run."""
        return self._act(
            run,
            f"/runs/{_run_id(run)}/cancel",
            {"reason": reason},
            if_match=if_match,
            idempotency_key=idempotency_key,
        )

    def resume(
        self,
        run: RunRef,
        *,
        checkpoint: str,
        reason: str,
        input_patch: dict[str, Any] | None = None,
        reexecute: bool = False,
        if_match: str | None = None,
        idempotency_key: str | None = None,
    ) -> Run:
        """Resume the run from the named checkpoint, merging ``input_patch`` into its
        effective input; ``reexecute`` makes the recorded side effects again instead of
        reusing their results. 422 ``unknown_checkpoint``; 409 ``not_allowed_in_state``."""
        body: dict[str, Any] = {"checkpoint": checkpoint, "reason": reason}
        if input_patch is not None:
            body["input_patch"] = input_patch
        if reexecute:
            body["reexecute"] = True
        return self._act(
            run,
            f"/runs/{_run_id(run)}/resume",
            body,
            if_match=if_match,
            idempotency_key=idempotency_key,
        )

    def retry(
        self,
        run: RunRef,
        *,
        reason: str,
        against_verify: bool = False,
        if_match: str | None = None,
        idempotency_key: str | None = None,
    ) -> Run:
        """A new attempt of the PAUSED run's failed (or unknown: "not done") step. 409
        ``not_allowed_in_state`` or ``nothing_to_retry``."""
        body: dict[str, Any] = {"reason": reason}
        if against_verify:
            body["against_verify"] = True
        return self._act(
            run,
            f"/runs/{_run_id(run)}/retry",
            body,
            if_match=if_match,
            idempotency_key=idempotency_key,
        )

    def raise_budget(
        self,
        run: RunRef,
        *,
        reason: str,
        add_model_calls: int = 0,
        add_tool_calls: int = 0,
        add_tokens: int = 0,
        add_cost_usd: str = "0",
        if_match: str | None = None,
        idempotency_key: str | None = None,
    ) -> Run:
        """Add to the run's limits (USD as a decimal string); a run paused by its budget
        resumes. 422 ``invalid_budget`` (nothing positive, past the maximum), 409
        ``limit_not_set``."""
        body: dict[str, Any] = {"reason": reason}
        for name, value in (
            ("add_model_calls", add_model_calls),
            ("add_tool_calls", add_tool_calls),
            ("add_tokens", add_tokens),
        ):
            if value:
                body[name] = value
        if add_cost_usd not in ("0", ""):
            body["add_cost_usd"] = add_cost_usd
        return self._act(
            run,
            f"/runs/{_run_id(run)}/budget",
            body,
            if_match=if_match,
            idempotency_key=idempotency_key,
        )

    def resolve(
        self,
        run: RunRef,
        step: str,
        *,
        outcome: str,
        evidence: str,
        result: Any = None,
        against_verify: bool = False,
        if_match: str | None = None,
        idempotency_key: str | None = None,
    ) -> Run:
        """Resolve the step whose outcome is unknown: ``outcome`` ``"done"`` (the side
        effect happened; ``result`` is its result) or ``"not-done"`` (the step runs
        again). 409 ``contradicts_verify`` unless ``against_verify``."""
        body: dict[str, Any] = {"outcome": outcome, "evidence": evidence}
        if result is not None:
            body["result"] = result
        if against_verify:
            body["against_verify"] = True
        return self._act(
            run,
            f"/runs/{_run_id(run)}/steps/{_path(step)}/resolve",
            body,
            if_match=if_match,
            idempotency_key=idempotency_key,
        )

    def replay(
        self,
        run: RunRef,
        *,
        reason: str,
        checkpoint: str | None = None,
        reexecute: bool = False,
        again: bool = False,
        dry_run: bool = False,
        if_match: str | None = None,
        idempotency_key: str | None = None,
    ) -> Replay:
        """Replay the finished run as a new run from ``checkpoint`` (default: the last
        one before the failed step); ``dry_run`` previews only. Needs the operator
        role (403 ``permission_denied``)."""
        body: dict[str, Any] = {"reason": reason}
        if checkpoint is not None:
            body["checkpoint"] = checkpoint
        for name, value in (("reexecute", reexecute), ("again", again), ("dry_run", dry_run)):
            if value:
                body[name] = True
        response = self._send(
            "POST",
            f"/runs/{_run_id(run)}/replay",
            body=body,
            has_body=True,
            headers=_action_headers(self._etag(run, if_match), idempotency_key),
        )
        return build(Replay, {**response.json(), "replayed": _replayed(response)})

    def replay_runs(
        self,
        *,
        reason: str,
        status: str = "FAILED",
        workflow: str | None = None,
        error_code: str | None = None,
        since: datetime | None = None,
        rate: float = 5.0,
        again: bool = False,
        reexecute: bool = False,
        dry_run: bool = False,
        limit: int = 500,
        idempotency_key: str | None = None,
    ) -> BulkReplay:
        """Replay every finished run the token sees in ``status`` (``FAILED``,
        ``CANCELLED`` or ``SUCCEEDED``), of ``workflow``, failed with ``error_code``,
        created at or after ``since``, and not replayed before unless ``again``: at most
        ``limit`` (1..1000), each from the last checkpoint before its failed step, the
        k-th starting ``k / rate`` seconds after the request (``rate`` per second,
        0 < rate <= 1000). ``dry_run`` previews only. With an ``idempotency_key`` the
        same call again answers the first answer and creates nothing. Needs the
        operator role (403 ``permission_denied``); 422 ``invalid_input`` naming the
        field."""
        body: dict[str, Any] = {"reason": reason, "status": status, "rate": rate, "limit": limit}
        for name, value in (("workflow", workflow), ("error_code", error_code)):
            if value is not None:
                body[name] = value
        if since is not None:
            body["since"] = since.isoformat()
        for name, flag in (("again", again), ("reexecute", reexecute), ("dry_run", dry_run)):
            if flag:
                body[name] = True
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        response = self._send("POST", "/replays", body=body, has_body=True, headers=headers)
        return build(BulkReplay, {**response.json(), "replayed": _replayed(response)})

    # -- approvals ------------------------------------------------------------------

    def approvals(self, *, status: str | None = None, limit: int = 100) -> list[Approval]:
        """Approvals of the runs the token sees, oldest first (``status="PENDING"``:
        those still to decide)."""
        return self._get_list(Approval, "/approvals", status=status, limit=limit)

    def run_approvals(self, run: RunRef) -> list[Approval]:
        """The run's approvals, oldest first."""
        return self._get_list(Approval, f"/runs/{_run_id(run)}/approvals")

    def decide(
        self,
        approval: Approval | int,
        decision: str,
        *,
        comment: str = "",
        arguments: dict[str, Any] | None = None,
        message: str = "",
        if_match: str | None = None,
        idempotency_key: str | None = None,
    ) -> Approval:
        """Decide ``approval`` (``"approve"`` or ``"reject"``): ``arguments`` approves
        an agent's tool call with these arguments instead (422 ``invalid_arguments``
        with field errors), ``message`` rejects it and lets the model read why.
        ``If-Match`` is the ETag of the approval's run: ``if_match``, else the run's
        current one (read first; an approval given by id needs ``if_match``). 403
        ``permission_denied``, ``self_approval_forbidden``; 409 ``decision_conflict``,
        ``approval_expired``."""
        if isinstance(approval, Approval):
            approval_id = approval.id
            etag = self._etag(approval.run_id, if_match)
        elif if_match is None:
            raise ValueError("an approval given by id needs if_match (its run's ETag)")
        else:
            approval_id, etag = approval, if_match
        body: dict[str, Any] = {"decision": decision, "comment": comment}
        if arguments is not None:
            body["arguments"] = arguments
        if message:
            body["message"] = message
        response = self._send(
            "POST",
            f"/approvals/{_number(approval_id, 'approval id')}/decide",
            body=body,
            has_body=True,
            headers=_action_headers(etag, idempotency_key),
        )
        return build(Approval, response.json())

    def approve(
        self,
        approval: Approval | int,
        *,
        comment: str = "",
        arguments: dict[str, Any] | None = None,
        if_match: str | None = None,
        idempotency_key: str | None = None,
    ) -> Approval:
        """``decide(approval, "approve", ...)``; ``arguments`` edits a tool call's."""
        return self.decide(
            approval,
            "approve",
            comment=comment,
            arguments=arguments,
            if_match=if_match,
            idempotency_key=idempotency_key,
        )

    def reject(
        self,
        approval: Approval | int,
        *,
        comment: str = "",
        message: str = "",
        if_match: str | None = None,
        idempotency_key: str | None = None,
    ) -> Approval:
        """``decide(approval, "reject", ...)``; ``message`` is what the model reads."""
        return self.decide(
            approval,
            "reject",
            comment=comment,
            message=message,
            if_match=if_match,
            idempotency_key=idempotency_key,
        )

    # -- signals and deferred tool results -------------------------------------------

    def signal(
        self,
        run: RunRef,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> Delivery:
        """Deliver the signal ``name`` with ``payload`` (JSON; ``None`` sends ``{}``),
        checked against the waiting step's schema (422 ``invalid_input``, nothing
        changes; 422 ``unknown_signal``; 409 ``run_terminal``). The
        ``idempotency_key`` is also the signal's request id: delivered once."""
        return self._deliver(
            f"/runs/{_run_id(run)}/signals/{_path(name)}",
            {} if payload is None else payload,
            idempotency_key,
        )

    def deliver_tool_result(
        self,
        run: RunRef,
        call_id: str,
        result: Any,
        *,
        idempotency_key: str | None = None,
    ) -> Delivery:
        """Deliver the outside result (any JSON) of the tool call ``call_id`` an agent
        deferred; 422 ``invalid_input`` when the run waits for no such call."""
        return self._deliver(
            f"/runs/{_run_id(run)}/tool-calls/{_path(call_id)}/result", result, idempotency_key
        )

    def _deliver(self, path: str, body: Any, idempotency_key: str | None) -> Delivery:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        response = self._send("POST", path, body=body, has_body=True, headers=headers)
        return build(Delivery, {**response.json(), "replayed": _replayed(response)})

    # -- schedules (staff tokens: runs.view_run to read, runs.operate_run to change) --

    def schedules(self) -> list[Schedule]:
        """Every schedule of the deployment, by name. 403 ``permission_denied`` without
        a staff token with ``runs.view_run``."""
        return self._get_list(Schedule, "/schedules")

    def create_schedule(
        self,
        name: str,
        workflow: str,
        *,
        cron: str | None = None,
        timezone: str | None = None,
        every: int | None = None,
        input: dict[str, Any] | None = None,
        overlap: str = "skip",
        catchup: str = "latest",
        catchup_window: int = 3600,
    ) -> Schedule:
        """A schedule starting ``workflow`` with ``input``: exactly one of ``cron`` (in
        ``timezone``, default UTC) and ``every`` (whole seconds); ``overlap`` ``skip``
        or ``allow``; ``catchup`` ``none``, ``latest`` or ``all`` within
        ``catchup_window`` seconds. 422 ``invalid_input`` naming the field,
        ``unknown_workflow``; 409 ``schedule_exists``."""
        body: dict[str, Any] = {
            "name": name,
            "workflow": workflow,
            "input": input or {},
            "overlap": overlap,
            "catchup": catchup,
            "catchup_window": catchup_window,
        }
        for key, value in (("cron", cron), ("timezone", timezone), ("every", every)):
            if value is not None:
                body[key] = value
        response = self._send("POST", "/schedules", body=body, has_body=True)
        return build(Schedule, response.json())

    def pause_schedule(self, name: str) -> Schedule:
        """Stop the schedule ticking (a paused one stays paused). 404 ``unknown_schedule``."""
        return self._schedule_action(name, "pause")

    def resume_schedule(self, name: str) -> Schedule:
        """Tick again from now; the paused time is not caught up. 404 ``unknown_schedule``."""
        return self._schedule_action(name, "resume")

    def trigger_schedule(self, name: str, *, idempotency_key: str | None = None) -> TickResult:
        """A tick now, outside the timetable (the overlap policy applies)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        response = self._send(
            "POST", f"/schedules/{_path(name)}/trigger", body={}, has_body=True, headers=headers
        )
        return build(TickResult, {**response.json(), "replayed": _replayed(response)})

    def delete_schedule(self, name: str) -> None:
        """Delete the schedule; its runs stay. 404 ``unknown_schedule``."""
        self._send("DELETE", f"/schedules/{_path(name)}")

    def _schedule_action(self, name: str, action: str) -> Schedule:
        response = self._send("POST", f"/schedules/{_path(name)}/{action}", body={}, has_body=True)
        return build(Schedule, response.json())

    # -- the event stream ---------------------------------------------------------

    def stream_events(
        self,
        run: RunRef,
        *,
        last_event_id: int = 0,
        reconnect_timeout: float = 60.0,
        read_timeout: float = 60.0,
    ) -> Iterator[Event]:
        """The run's events after ``last_event_id``, then live ones as they happen,
        until the run has finished and every event was delivered (Server-Sent Events).

        When the connection breaks (the server restarts, a proxy drops it, nothing,
        not even a heartbeat, arrives for ``read_timeout`` seconds), it reconnects with
        ``Last-Event-ID`` and goes on: each event is yielded once, in ``seq`` order,
        without gaps. Raises ``StreamError`` when no reconnection succeeds for
        ``reconnect_timeout`` seconds, and ``ApiError`` for a refusal (401, 404)."""
        run_id = _run_id(run)
        last = last_event_id
        finished = False
        broken_since: float | None = None
        attempt = 0
        while True:
            delivered = 0
            try:
                with self._http.stream(
                    "GET",
                    f"/runs/{run_id}/stream",
                    headers={"Last-Event-ID": str(last), "Accept": "text/event-stream"},
                    timeout=httpx.Timeout(self.timeout, read=read_timeout),
                ) as response:
                    if not response.is_success:
                        response.read()
                        error = ApiError.from_response(response)
                        if error.status < 500:
                            raise error
                        raise httpx.RemoteProtocolError(str(error))
                    broken_since, attempt = None, 0
                    for event in _sse_events(response.iter_lines()):
                        if event.seq <= last:
                            continue  # already delivered before a reconnect
                        last = event.seq
                        delivered += 1
                        finished = finished or event.type in TERMINAL_EVENTS
                        yield event
            except httpx.TransportError as exc:
                now = time.monotonic()
                broken_since = broken_since if broken_since is not None else now
                if now - broken_since >= reconnect_timeout:
                    raise StreamError(
                        f"the stream of run {run_id} broke and did not come back within "
                        f"{reconnect_timeout:g} s: {exc}",
                        last,
                    ) from exc
                time.sleep(min(self.retry_backoff * 2**attempt, MAX_RETRY_AFTER))
                attempt += 1
                continue
            # A clean end: the server ends the stream once the run has finished and all
            # is sent. An end without that (a proxy closing an idle connection) is
            # followed by one more connection, which ends at once if nothing is left.
            if finished or delivered == 0:
                return


def _sse_events(lines: Iterator[str]) -> Iterator[Event]:
    """The events of an SSE body's lines: frames of ``id``/``event``/``data`` fields
    ended by a blank line; comments (heartbeats) and ``retry`` are skipped."""
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield build(Event, json.loads("\n".join(data)))
            data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)


def _retry_after(headers: Mapping[str, str]) -> float:
    value = headers.get("retry-after") or headers.get("Retry-After") or ""
    try:
        return min(float(value), MAX_RETRY_AFTER)
    except ValueError:
        return 0.0


def _action_headers(etag: str, idempotency_key: str | None) -> dict[str, str]:
    headers = {"If-Match": etag}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return headers


def _replayed(response: httpx.Response) -> bool:
    return response.headers.get("Idempotent-Replayed") == "true"


def _run(response: httpx.Response) -> Run:
    return build(Run, {**response.json(), "replayed": _replayed(response)})


def _path(segment: str) -> str:
    """``segment`` quoted for one path segment (a thread id may hold ``/`` or ``?``)."""
    return quote(segment, safe="")
