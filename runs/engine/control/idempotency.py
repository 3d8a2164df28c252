"""Client idempotency for run creation and run actions (API ``Idempotency-Key``).

The unique constraint ``Run(owner, request_id)`` decides which of several concurrent
requests creates the run; the others hit the constraint and return the winner's run.
``Run.request_fingerprint`` (sha256 of the canonical request body) tells a retry of the
same request from a reuse of the key for a different one. Keys live as long as their
run row, so at least as long as runs are kept.

Every answer to one key is rendered from one stored body (``Run.request_response``,
``ActionRequest.response``), never from the run as it is at the time of the retry: a
replay repeats the first response byte for byte.

Actions on a run (cancel, resume, ...) keep their keys in ``ActionRequest``: the key row
is inserted before the action runs (the unique constraint picks one request among
concurrent ones), the response is stored when it is done, and a retry or a concurrent
duplicate replays that response.
"""

import hashlib
import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from runs.engine.control.lifecycle import create_run
from runs.engine.errors import ControlError
from runs.models import ActionRequest, Run

#: Seconds after which a claimed key whose request never stored a response (its process
#: died) is given to the next request with that key.
ABANDONED_AFTER = 300


def fingerprint(body: dict[str, Any]) -> str:
    """sha256 hex of ``body`` as canonical JSON (sorted keys, no whitespace)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def find_request(owner, request_id: str) -> Run | None:
    """The run ``owner`` already created with ``request_id``, if any."""
    return Run.objects.filter(owner=owner, request_id=request_id).first()


def check_replay(run: Run, request_fingerprint: str) -> Run:
    """Return ``run`` if it was created by the same request body; raises ``ControlError``
    ``idempotency_key_reused`` otherwise."""
    if run.request_fingerprint != request_fingerprint:
        raise ControlError(
            "idempotency_key_reused",
            "this Idempotency-Key was already used with a different request body",
            {"Idempotency-Key": "already used for run " + str(run.pk)},
        )
    return run


def start_run_once(
    workflow: str,
    *,
    thread_id: str,
    input: Any,
    owner,
    request_id: str,
    request_fingerprint: str,
    budget: dict | None = None,
    actor: str,
    respond: Callable[[Run], Any] | None = None,
) -> tuple[Run, bool]:
    """Start the run for ``(owner, request_id)`` unless it exists; returns ``(run,
    created)``.

    ``respond(run)`` gives the JSON body answering the creation; it is stored as
    ``run.request_response`` (read back, as a replay will see it). The run, its
    fingerprint and that body commit together, so a concurrent replay never sees a run
    without them. Raises ``ControlError`` as ``start_run`` does, and
    ``idempotency_key_reused`` when the key belongs to a different body.
    """
    with transaction.atomic():
        run, created = create_run(
            workflow,
            thread_id=thread_id,
            input=input,
            owner=owner,
            budget=budget,
            request_id=request_id,
            request_fingerprint=request_fingerprint,
            actor=actor,
        )
        if not created:
            # This key's run exists (created before, or by a concurrent request that
            # won the unique constraint): a replay of the same body, or a refusal.
            return check_replay(run, request_fingerprint), False
        stored = Run.objects.filter(pk=run.pk)
        stored.update(request_response=respond(run) if respond is not None else None)
        run.request_response = stored.values_list("request_response", flat=True).get()
    return run, True


def claim_action(owner, key: str, request_fingerprint: str) -> tuple[ActionRequest, bool]:
    """Claim ``key`` for an action of ``owner``: returns ``(record, True)`` if this request
    inserted it (and must run the action, then ``finish_action``), or the existing
    ``(record, False)``. Raises ``ControlError("idempotency_key_reused")`` when the key
    belongs to a different request (method, path or body)."""
    # A claim whose request died before answering is freed for the retry.
    ActionRequest.objects.filter(
        owner=owner,
        key=key,
        status_code__isnull=True,
        created_at__lt=Now() - timedelta(seconds=ABANDONED_AFTER),
    ).delete()
    try:
        with transaction.atomic():
            record = ActionRequest.objects.create(
                owner=owner, key=key, fingerprint=request_fingerprint
            )
        return record, True
    except IntegrityError:
        existing = ActionRequest.objects.filter(owner=owner, key=key).first()
        if existing is None:  # deleted as abandoned in between: the caller may retry
            raise ControlError(
                "request_in_progress", "a request with this Idempotency-Key is in progress"
            ) from None
        record = existing
    if record.fingerprint != request_fingerprint:
        raise ControlError(
            "idempotency_key_reused",
            "this Idempotency-Key was already used for a different request",
            {"Idempotency-Key": "already used for another request"},
        )
    return record, False


def await_response(record: ActionRequest, timeout: float) -> ActionRequest | None:
    """Wait up to ``timeout`` seconds for the request that claimed ``record`` to store its
    response; returns the finished record, or ``None`` if it is still running."""
    deadline = time.monotonic() + timeout
    while True:
        record.refresh_from_db()
        if record.status_code is not None:
            return record
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def finish_action(record: ActionRequest, status_code: int, body, etag: str = ""):
    """Store the response of the request that claimed ``record`` (JSON ``body``) and
    return the body as stored (read back), which is what every replay answers. Raises
    ``values.InvalidValue`` for a body that cannot be stored."""
    ActionRequest.objects.filter(pk=record.pk).update(
        status_code=status_code, response=body, etag=etag
    )
    return ActionRequest.objects.values_list("response", flat=True).get(pk=record.pk)


def release_action(record: ActionRequest) -> None:
    """Give the key back after a failure that produced no response (a server error), so
    a retry runs the action."""
    ActionRequest.objects.filter(pk=record.pk, status_code__isnull=True).delete()
