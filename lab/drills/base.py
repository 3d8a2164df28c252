"""The drill framework: a drill is a function that runs a fault scenario in a fresh
``Sandbox`` and returns ``Check`` rows (what was expected, what was observed, pass)."""

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import InterfaceError, OperationalError, connection

from runs.models import Event, Run, Step
from runs.states import RUN_TERMINAL


@dataclass
class Check:
    """One expectation of a drill: ``what`` is checked, ``expected`` and ``observed``
    as short text, ``ok`` whether they agree."""

    what: str
    expected: str
    observed: str
    ok: bool


class DrillSkipped(Exception):
    """Raised by a drill that cannot run on this machine; the message says why. A
    skipped drill does not fail ``drill --all``."""


@dataclass
class DrillResult:
    """The outcome of one drill: its checks, the error that stopped it, or the reason
    it was skipped."""

    name: str
    title: str
    checks: list[Check] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    skipped: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "title": self.title,
            "passed": self.passed,
            "error": self.error,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 1),
            "checks": [c.__dict__ for c in self.checks],
        }


class Recorder:
    """Collects a drill's checks: ``expect(what, expected, observed)`` compares with ==,
    ``check(what, expected, observed, ok)`` takes an explicit verdict."""

    def __init__(self):
        self.checks: list[Check] = []

    def expect(self, what: str, expected, observed) -> bool:
        return self.check(what, expected, observed, expected == observed)

    def check(self, what: str, expected, observed, ok: bool) -> bool:
        self.checks.append(Check(what, str(expected), str(observed), bool(ok)))
        return bool(ok)


def running_or_exit(proc) -> str:
    """``"alive"`` or ``"exited N"`` for a ``subprocess.Popen``: how a drill's report
    shows whether a process it started still runs."""
    code = proc.poll()
    return "alive" if code is None else f"exited {code}"


@dataclass
class Drill:
    """A registered drill: ``fn(recorder)`` does the scenario and records checks."""

    name: str
    title: str
    fn: Callable[[Recorder], None]


DRILLS: dict[str, Drill] = {}


def drill(name: str, title: str):
    """Register the decorated function as drill ``name``."""

    def decorator(fn):
        DRILLS[name] = Drill(name, title, fn)
        return fn

    return decorator


def run_drill(name: str) -> DrillResult:
    """Run one drill, turning an exception into a failed result with its traceback."""
    spec = DRILLS[name]
    result = DrillResult(spec.name, spec.title)
    recorder = Recorder()
    started = time.monotonic()
    try:
        spec.fn(recorder)
    except DrillSkipped as exc:
        result.skipped = str(exc)
    except Exception:  # noqa: BLE001 - a crashed drill is a failed drill, with the reason
        result.error = traceback.format_exc(limit=8)
    result.checks = recorder.checks
    result.seconds = time.monotonic() - started
    return result


def format_table(results: list[DrillResult]) -> str:
    """The drill / expected / observed / pass table."""
    rows = [("drill", "check", "expected", "observed", "pass")]
    for r in results:
        for c in r.checks:
            rows.append((r.name, c.what, c.expected, c.observed, "pass" if c.ok else "FAIL"))
        if r.skipped:
            rows.append((r.name, "drill ran", "on this machine", f"skipped: {r.skipped}", "SKIP"))
        if r.error:
            rows.append(
                (
                    r.name,
                    "drill ran to the end",
                    "no error",
                    r.error.strip().splitlines()[-1],
                    "FAIL",
                )
            )
    widths = [
        min(max(len(row[i]) for row in rows), cap) for i, cap in enumerate((18, 36, 40, 48, 4))
    ]
    lines = []
    for row in rows:
        lines.append("  ".join(cell[:w].ljust(w) for cell, w in zip(row, widths, strict=True)))
    skipped = sum(bool(r.skipped) for r in results)
    passed = sum(r.passed for r in results) - skipped
    lines.append(f"{passed} passed, {len(results) - passed - skipped} failed, {skipped} skipped")
    return "\n".join(lines)


# -- helpers the drills share -----------------------------------------------------------


def _read_retrying(read):
    """``read()``, retried while the database is unreachable (the DB-outage drill)."""
    for _ in range(300):
        try:
            return read()
        except (OperationalError, InterfaceError):
            connection.close()
            time.sleep(0.2)
    return read()


def wait_status(run_id, statuses, timeout: float) -> str:
    """Wait until the run's status is in ``statuses``; returns the last status seen."""
    deadline = time.monotonic() + timeout
    while True:
        status = _read_retrying(lambda: Run.objects.values_list("status", flat=True).get(pk=run_id))
        if status in statuses or time.monotonic() >= deadline:
            return status
        time.sleep(0.2)


def wait_terminal(run_ids, timeout: float) -> dict:
    """Wait until every run is terminal (or ``timeout``); returns ``{run_id: status}``."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = _read_retrying(
            lambda: dict(Run.objects.filter(pk__in=run_ids).values_list("pk", "status"))
        )
        if all(s in RUN_TERMINAL for s in statuses.values()) or time.monotonic() >= deadline:
            return statuses
        time.sleep(0.2)


def events(run_id, types: tuple[str, ...] | None = None) -> list[Event]:
    query = Event.objects.filter(run_id=run_id).order_by("seq")
    if types:
        query = query.filter(type__in=types)
    return list(query)


def steps(run_id) -> dict[str, Step]:
    """The run's steps by name (latest generation wins)."""
    return {s.name: s for s in Step.objects.filter(run_id=run_id).order_by("generation", "seq")}


def owner_pid(owner: str) -> int | None:
    """The pid in a worker id ``host:pid:suffix``."""
    try:
        return int(owner.split(":")[-2])
    except (IndexError, ValueError):
        return None
