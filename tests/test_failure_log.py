"""A loop that keeps failing (the database away) logs one traceback, then a line every
``every`` seconds, then one line when it works again."""

import logging

from runs.engine.execution import failure_log
from runs.engine.execution.failure_log import RepeatedFailureLog


def test_it_logs_a_streak_once_then_every_interval_then_the_recovery(caplog, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(failure_log.time, "monotonic", lambda: now[0])
    log = RepeatedFailureLog(logging.getLogger("t"), "sweep", every=30)
    caplog.set_level(logging.WARNING, logger="t")
    for second in range(0, 61):  # one failure a second for a minute
        now[0] = 100.0 + second
        try:
            raise ConnectionError("server closed the connection\nmore detail")
        except ConnectionError as exc:
            log.failed(exc)
    now[0] = 170.0
    log.succeeded()
    log.succeeded()  # a healthy round after the recovery says nothing
    records = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert records == [
        ("sweep failed; retrying", True),
        ("sweep still failing after 30 s (31 tries): ConnectionError: server closed the "
         "connection", False),
        ("sweep still failing after 60 s (61 tries): ConnectionError: server closed the "
         "connection", False),
        ("sweep works again after 70 s (61 failed tries)", False),
    ]  # fmt: skip
