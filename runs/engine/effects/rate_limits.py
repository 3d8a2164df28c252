"""Rate limits by name, counted in the database across all workers.

A limit (``AGENTOPS_RATE_LIMITS``: ``{"openai": {"requests_per_minute": 500,
"tokens_per_minute": 200000}}``, or ``requests`` / ``tokens`` per ``window_seconds``;
or a ``RateLimit`` row set in the admin, which wins over the setting of its name)
applies to model requests whose model is that name or whose provider is (``openai``
covers ``openai:gpt-4.1-mini``), and to every attempt of a step that declares
``rate_limit="name"``.

``acquire`` grants a call a place in each of its limits' sliding windows in one short
transaction, under a lock per limit name (a transaction advisory lock on PostgreSQL;
SQLite's IMMEDIATE transactions hold its one write lock), so workers granting at once
take turns and the count they read includes every grant committed before. A call over
a limit waits in its slot (the process's heartbeat keeps its lease; a cancel or a lost
lease ends the wait) until the window allows it: no failure, no retry counted. While it
waits, a row marks it waiting, for the console and ``/metrics``. A granted call counts
while it is in flight (as long as its attempt holds its lease: a dead worker's calls
stop counting with its lease) and, once ``settle`` recorded its end and its tokens, for
one window from that end: the calls that reach the provider within any window never
outnumber the limit, however long each takes to get there. Tokens are known only at
a call's end: a window whose tokens reached the limit grants nothing more until the
oldest call leaves it.

A provider's 429 with ``Retry-After`` is a ``hold``: no call to that provider is
granted before it passes, from any worker.
"""

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F, Min, Q, Sum
from django.db.models.functions import Now

from agentops.db_pool import release_connection
from runs.engine.state.clock import db_now
from runs.models import RateLimit, RateLimitCall, RateLimitHold, Step
from runs.states import StepStatus

#: First key of the per-name transaction advisory lock, apart from the other engine locks.
LOCK_NAMESPACE = 0x41474F52
#: Longest single sleep of a waiting call, in seconds: it checks for a cancel or a lost
#: lease at least this often.
WAIT_SLICE = 1.0
#: Longest hold a ``Retry-After`` sets, in seconds (a bigger one is cut to this).
MAX_HOLD = 3600.0


#: A granted call not finished whose attempt still holds its step: it counts whatever
#: its age (one whose worker died stops counting when its lease goes).
_in_flight = Q(
    finished=False,
    step__status=StepStatus.RUNNING,
    step__attempt=F("attempt"),
    step__lease_until__gt=Now(),
)


@dataclass(frozen=True)
class Limit:
    """One named limit: at most ``requests`` calls and ``tokens`` tokens (``None``: no
    bound) in any ``window_seconds``."""

    name: str
    requests: int | None
    tokens: int | None
    window_seconds: float


def configured(names: Iterable[str] | None = None) -> dict[str, Limit]:
    """The limits by name (only ``names`` when given): ``AGENTOPS_RATE_LIMITS`` (checked
    at start-up), each overridden by the admin's ``RateLimit`` row of its name, plus
    the admin's other rows. One query; database errors propagate."""
    limits = {
        name: Limit(name, spec["requests"], spec["tokens"], spec["window_seconds"])
        for name, spec in settings.AGENTOPS_RATE_LIMITS.items()
    }
    rows = RateLimit.objects.all()
    if names is not None:
        names = set(names)
        limits = {name: limit for name, limit in limits.items() if name in names}
        rows = rows.filter(name__in=names)
    for row in rows:
        limits[row.name] = Limit(row.name, row.requests, row.tokens, row.window_seconds)
    return limits


def model_scopes(model_name: str) -> list[str]:
    """The names a request to ``model_name`` is counted and held under: its provider
    (the part before ``:``) and the model itself."""
    provider = model_name.split(":", 1)[0]
    return [provider] if provider == model_name else [provider, model_name]


def acquire(
    scopes: Iterable[str], *, step: Step, attempt: int, check: Callable[[], None]
) -> list[int]:
    """Wait until a call of attempt ``attempt`` of ``step`` may go out under every
    limit and hold named in ``scopes``, and grant it. ``check()`` is called before each
    try and may raise to end the wait (``ctx.safe_point``: ``LeaseLost``,
    ``CancelRequested``). Returns the ids of the grants to ``settle`` after the call
    (empty when no limit applies). Database errors propagate."""
    names = sorted(set(scopes))
    limits = list(configured(names).values())
    while True:
        check()
        granted, wait = _try(names, limits, step, attempt)
        if granted is not None:
            return granted
        # No connection is held while the call waits.
        release_connection()
        time.sleep(min(max(wait, 0.01), WAIT_SLICE))


def _try(
    names: list[str], limits: list[Limit], step: Step, attempt: int
) -> tuple[list[int] | None, float]:
    """One try: ``(grant ids, 0)`` or ``(None, seconds to wait at least)``."""
    holds = RateLimitHold.objects.filter(name__in=names, until__gt=Now())
    if not limits and not holds.exists():
        return [], 0.0
    with transaction.atomic():
        held = dict(holds.values_list("name", "until"))
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                for name in names:
                    cursor.execute(
                        "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [LOCK_NAMESPACE, name]
                    )
        now = db_now()
        wait = max([(until - now).total_seconds() for until in held.values()], default=0.0)
        blocked = {name for name, until in held.items() if until > now}
        for limit in limits:
            window = timedelta(seconds=limit.window_seconds)
            calls = RateLimitCall.objects.filter(name=limit.name, waiting=False)
            calls.filter(at__lte=now - window).exclude(_in_flight).delete()
            used = calls.aggregate(
                n=Count("pk"),
                tokens=Sum("tokens"),
                oldest=Min("at", filter=Q(finished=True)),
            )
            full = (limit.requests is not None and used["n"] >= limit.requests) or (
                limit.tokens is not None and (used["tokens"] or 0) >= limit.tokens
            )
            if full:
                blocked.add(limit.name)
                # Every counted call still in flight: try again after a slice.
                frees = used["oldest"] + window - now if used["oldest"] else None
                wait = max(wait, frees.total_seconds() if frees else WAIT_SLICE)
        mine = RateLimitCall.objects.filter(step=step, attempt=attempt, waiting=True)
        if blocked:
            for name in blocked - set(mine.values_list("name", flat=True)):
                RateLimitCall.objects.create(name=name, waiting=True, step=step, attempt=attempt)
            return None, wait
        mine.delete()
        grants = [
            RateLimitCall.objects.create(name=limit.name, step=step, attempt=attempt)
            for limit in limits
        ]
        return [g.pk for g in grants], 0.0


def settle(grants: list[int], tokens: int = 0) -> None:
    """After the call: its grants count for one window from now (the call's end), with
    ``tokens``."""
    if grants:
        RateLimitCall.objects.filter(pk__in=grants).update(
            at=Now(), tokens=max(0, tokens), finished=True
        )


def hold(name: str, seconds: float) -> None:
    """No call under ``name`` is granted for the next ``seconds`` (cut to ``MAX_HOLD``),
    from any worker; a longer hold already set stays."""
    seconds = min(max(float(seconds), 0.0), MAX_HOLD)
    with transaction.atomic():
        until = db_now() + timedelta(seconds=seconds)
        if not RateLimitHold.objects.filter(name=name).exists():
            RateLimitHold.objects.get_or_create(name=name, defaults={"until": until})
        RateLimitHold.objects.filter(name=name, until__lt=until).update(until=until)


def waiting_by_limit() -> dict[str, int]:
    """``{limit name: calls}`` waiting for a place now (attempts whose step still runs
    under a live lease), for the overview and ``/metrics``."""
    rows = (
        RateLimitCall.objects.filter(
            waiting=True,
            step__status=StepStatus.RUNNING,
            step__attempt=F("attempt"),
            step__lease_until__gt=Now(),
        )
        .order_by()
        .values("name")
        .annotate(n=Count("pk"))
    )
    return {row["name"]: row["n"] for row in rows}
