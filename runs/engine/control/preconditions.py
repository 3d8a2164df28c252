"""Client preconditions on a run: its entity tag and "act only if it is still this".

A run's tag (``run_etag``) is ``"<version>.<generation>.<budget digest>"``: what an
operator's decision rests on. Every status change bumps ``version``, a resume from a
checkpoint bumps ``generation``, a budget raise changes the limits; so every action
that succeeds gives a new tag, while a worker streaming tokens or finishing a step
without a status change does not (a client need not chase a busy run to cancel it).

``expect(run_id, tag)`` makes the action inside it conditional: the first
``run_transaction`` on that run compares the tag *after* locking the row, so of
several concurrent requests holding the same tag exactly one proceeds and the others
get ``ControlError("run_changed")``; nothing is checked before the lock (no
read-then-write race). Once the action has written (its transaction flushed events), its
later transactions on the run are not checked again, so a multi-step action (cancel,
then its compensations) is never refused half-way.
"""

import hashlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from runs.engine.errors import ControlError
from runs.engine.state import gateway
from runs.models import Run

_TAG = re.compile(r"^[0-9]{1,10}\.[0-9]{1,10}\.[0-9a-f]{8}$")


def run_etag(run: Run) -> str:
    """The run's entity tag as sent in ``ETag`` and expected in ``If-Match``, quoted:
    ``'"3.1.5d41402a"'`` for version 3, generation 1 and those budget limits."""
    limits = json.dumps(run.budget or {}, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(limits.encode()).hexdigest()[:8]
    return f'"{run.version}.{run.generation}.{digest}"'


def parse_if_match(value: str) -> str:
    """The tag of an ``If-Match`` header value (one tag, strong or ``W/`` weak, quoted or
    not), normalised to ``run_etag``'s form. Raises ``ControlError("invalid_if_match")``
    for anything else (several tags, ``*``, garbage)."""
    tag = value.strip()
    if tag.startswith("W/"):
        tag = tag[2:]
    tag = tag.strip('"')
    if not _TAG.match(tag):
        raise ControlError(
            "invalid_if_match",
            'If-Match must be one run ETag, e.g. "3.1.5d41402a" (read it from GET /runs/{id})',
            {"If-Match": "one run ETag"},
        )
    return f'"{tag}"'


@dataclass
class _Expectation:
    run_id: str
    etag: str
    checked_tx: gateway.RunTx | None = None
    seq_at_check: int = 0

    def wrote(self) -> bool:
        """True once the transaction that passed the check has written events (every
        change an action makes is recorded as an event)."""
        return self.checked_tx is not None and self.checked_tx.run.event_seq > self.seq_at_check


_current: ContextVar[_Expectation | None] = ContextVar("run_precondition", default=None)


@contextmanager
def expect(run_id, etag: str | None) -> Iterator[None]:
    """Make the run transactions on ``run_id`` inside the block conditional on the run
    still having ``etag`` (see the module docstring); ``etag=None`` checks nothing.
    Raises ``ControlError("run_changed")`` from the first such transaction otherwise."""
    if etag is None:
        yield
        return
    token = _current.set(_Expectation(str(run_id), etag))
    try:
        yield
    finally:
        _current.reset(token)


def check_locked(tx: gateway.RunTx) -> None:
    """Run-locked hook: inside ``expect(run_id, etag)``, refuse the first transaction on
    that run whose ETag is no longer ``etag``. Raises ``ControlError("run_changed")``
    naming the current ETag (the transaction rolls back)."""
    expectation = _current.get()
    if expectation is None or str(tx.run.pk) != expectation.run_id or expectation.wrote():
        return
    current = run_etag(tx.run)
    if current != expectation.etag:
        raise ControlError(
            "run_changed",
            f"the run changed since you read it (ETag now {current}, you sent "
            f"{expectation.etag}); read it again and decide anew",
            {"If-Match": f"now {current}"},
        )
    expectation.checked_tx = tx
    expectation.seq_at_check = tx.run.event_seq
