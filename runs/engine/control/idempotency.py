"""Client idempotency for run creation (API ``Idempotency-Key``).

The unique constraint ``Run(owner, request_id)`` decides which of several concurrent
requests creates the run; the others hit the constraint and return the winner's run.
``Run.request_fingerprint`` (sha256 of the canonical request body) tells a retry of the
same request from a reuse of the key for a different one. Keys live as long as their
run row, so at least as long as runs are kept.
"""

import hashlib
import json
from typing import Any

from django.db import IntegrityError, transaction

from runs.engine.control.lifecycle import ControlError, start_run
from runs.models import Run


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
) -> tuple[Run, bool]:
    """Start the run for ``(owner, request_id)`` unless it exists; returns ``(run,
    created)``.

    The run and its fingerprint commit together, so a concurrent replay never sees a run
    without its fingerprint. Raises ``ControlError`` as ``start_run`` does, and
    ``idempotency_key_reused`` when the key belongs to a different body.
    """
    existing = find_request(owner, request_id)
    if existing is not None:
        return check_replay(existing, request_fingerprint), False
    try:
        with transaction.atomic():
            run = start_run(
                workflow,
                thread_id=thread_id,
                input=input,
                owner=owner,
                budget=budget,
                request_id=request_id,
                actor=actor,
            )
            Run.objects.filter(pk=run.pk).update(request_fingerprint=request_fingerprint)
            run.request_fingerprint = request_fingerprint
    except IntegrityError:
        # Another request with this key committed first (the constraint, not a read,
        # decided it); return its run.
        existing = find_request(owner, request_id)
        if existing is None:
            raise
        return check_replay(existing, request_fingerprint), False
    return run, True
