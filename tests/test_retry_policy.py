"""The retry policy value object and call timeouts (no database, no processes)."""

import random
import threading
from datetime import UTC, datetime

import pytest

from agentops.authoring import RetryPolicy
from runs.engine.effects.calls import CallTimedOut, call_with_timeout
from runs.engine.effects.retry import retry_after_seconds

POLICY = RetryPolicy(
    max_attempts=4, initial_delay=1.0, max_delay=3.0, multiplier=2.0, jitter=0.2, deadline=30.0
)


def test_it_backs_off_exponentially_with_jitter_up_to_the_cap():
    rng = random.Random(7)
    for attempt, (low, high) in enumerate([(0.8, 1.0), (1.6, 2.0), (2.4, 3.0)], start=1):
        assert POLICY.bounds(attempt) == pytest.approx((low, high))
        decision = POLICY.decide(attempt, "RATE_LIMITED", rng=rng)
        assert decision.retry and low <= decision.delay <= high


def test_it_retries_the_retryable_codes_and_never_the_others():
    for code in ("RATE_LIMITED", "DEPENDENCY_UNAVAILABLE", "TIMEOUT"):
        assert POLICY.decide(1, code).retry
    for code in ("INVALID_ARGUMENT", "PERMISSION_DENIED", "BUDGET_EXHAUSTED", "SOMETHING_NEW"):
        decision = POLICY.decide(1, code)
        assert not decision.retry and "not retryable" in decision.reason


def test_it_stops_when_attempts_or_the_deadline_run_out():
    assert not POLICY.decide(4, "RATE_LIMITED").retry
    late = POLICY.decide(1, "RATE_LIMITED", elapsed=29.5)
    assert not late.retry and "deadline" in late.reason


def test_it_refuses_unbounded_or_contradictory_policies():
    for bad in (
        {"max_attempts": 0},
        {"max_attempts": True},
        {"jitter": 1.0},
        {"initial_delay": 5, "max_delay": 1},
        {"deadline": 0},
        {"retryable": frozenset({"INVALID_ARGUMENT"})},
    ):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)


def test_it_raises_call_timed_out_and_keeps_a_late_result():
    release = threading.Event()
    late = []
    landed = threading.Event()

    def slow():
        release.wait(10)
        return "late"

    def on_late(value):
        late.append(value)
        landed.set()

    with pytest.raises(CallTimedOut):
        call_with_timeout(slow, 0.05, on_late=on_late)
    release.set()
    assert landed.wait(10)
    assert late == ["late"]
    assert call_with_timeout(lambda: 42, 5) == 42
    with pytest.raises(ZeroDivisionError):
        call_with_timeout(lambda: 1 / 0, 5)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (120, 120.0),
        ("120", 120.0),
        (" 7 ", 7.0),
        ("Thu, 01 Jan 2026 00:02:00 GMT", 120.0),
        ("Thu, 01 Jan 2026 00:00:00 GMT", 0.0),  # a date already past: no wait
        (-5, 0.0),
        ("soon", None),
        (None, None),
        (float("nan"), None),
    ],
)
def test_it_reads_retry_after_as_seconds_or_an_http_date(value, seconds):
    now = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC).timestamp()
    assert retry_after_seconds(value, now=now) == seconds


def test_it_waits_at_least_as_long_as_retry_after_asks_within_the_deadline():
    rng = random.Random(7)
    policy = RetryPolicy(max_attempts=4, deadline=600.0)
    asked = policy.decide(1, "RATE_LIMITED", rng=rng, retry_after=120.0)
    assert asked.retry and asked.delay == 120.0 and asked.retry_after == 120.0
    short = policy.decide(1, "RATE_LIMITED", rng=rng, retry_after=0.01)
    assert short.delay >= 0.8  # the policy's backoff still applies
    capped = policy.decide(2, "RATE_LIMITED", elapsed=550.0, rng=rng, retry_after=120.0)
    assert capped.retry and capped.delay == pytest.approx(50.0) and "deadline" in capped.reason
    endless = RetryPolicy(max_retry_after=300.0).decide(1, "RATE_LIMITED", retry_after=86400.0)
    assert endless.delay == 300.0


def test_it_never_retries_a_value_that_cannot_be_stored():
    decision = POLICY.decide(1, "INVALID_OUTPUT")
    assert not decision.retry and "not retryable" in decision.reason


@pytest.mark.parametrize("value", [10**400, -(10**400), "9" * 400, float("inf")])
def test_a_retry_after_no_float_holds_is_unreadable_not_a_crash(value):
    assert retry_after_seconds(value, now=0) is None


def test_a_backoff_that_outgrows_a_float_stays_at_its_cap():
    policy = RetryPolicy(max_attempts=5000, initial_delay=1, max_delay=60, jitter=0)
    assert policy.delay_for(4000) == 60 and policy.bounds(4000) == (60, 60)


@pytest.mark.parametrize(
    ("field", "given"),
    [
        ("initial_delay", {"initial_delay": 10**12, "max_delay": 10**12}),
        ("max_delay", {"max_delay": 10**12}),
        ("deadline", {"deadline": 10**12}),
    ],
)
def test_a_retry_delay_past_the_duration_bound_is_refused(field, given):
    with pytest.raises(ValueError, match=f"{field} must be a number of seconds from 0 to"):
        RetryPolicy(**given)
