"""The API's documents as typed, frozen dataclasses, built from the JSON bodies.

Each class mirrors one response shape of ``/api/v1`` (its OpenAPI schema): times are
timezone-aware ``datetime``, ids of runs are the UUID strings the API writes, amounts
of money are the decimal strings it writes (``"0.10"``). Fields the server adds later
are ignored, so an older client keeps working against a newer server.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")

#: The run states in which nothing happens any more.
TERMINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


def build(cls: type[T], data: Any) -> T:
    """An instance of the dataclass ``cls`` from the JSON object ``data``, converting
    nested documents, lists of them and ISO times by the field types; keys ``cls`` does
    not know are ignored. Raises ``TypeError``/``ValueError`` when ``data`` does not fit
    (a field missing, a time that is not ISO 8601)."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    return cls(**{name: convert(data[name]) for name, convert in _converters(cls) if name in data})


Converter = Callable[[Any], Any]
_CONVERTERS: dict[type, tuple[tuple[str, Converter], ...]] = {}


def _converters(cls: type) -> tuple[tuple[str, Converter], ...]:
    """``(name, converter)`` of the dataclass's ``__init__`` fields, made once per class:
    resolving the annotations costs far more than building an instance."""
    found = _CONVERTERS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        fields = dataclasses.fields(cls)
        found = tuple((f.name, _converter(hints[f.name])) for f in fields if f.init)
        _CONVERTERS[cls] = found
    return found


def _converter(hint: Any) -> Converter:
    """The function turning a JSON value into ``hint``'s type (``None`` stays ``None``)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return _converter(options[0]) if len(options) == 1 else _same
    if origin is list:
        (inner,) = typing.get_args(hint)
        item = _converter(inner)
        if item is _same:
            return _same
        return lambda value: None if value is None else [item(v) for v in value]
    if hint is datetime:
        return lambda value: None if value is None else datetime.fromisoformat(value)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        nested = hint
        return lambda value: None if value is None else build(nested, value)
    return _same


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Attempt:
    """One attempt of a step: its number (the fencing token), the worker that ran it,
    the event type that ended it (``outcome``, ``None`` while it runs) and ``result`` in
    one word (``succeeded``, ``failed``, ``lost``, ``waited``, ``fenced``, ...)."""

    attempt: int
    worker: str | None
    outcome: str | None
    result: str
    error_code: str | None
    error_detail: str | None
    taken_over_by: str | None
    started_at: datetime | None
    ended_at: datetime | None


@dataclass(frozen=True)
class Step:
    """A step of a run; ``attempt`` is the number of attempts claimed so far. A branch
    of a map step has ``branch_of`` (the map step's ``id``) and ``position`` (0-based,
    the index of its item); both are ``None`` for every other step."""

    id: int
    name: str
    seq: int
    generation: int
    status: str
    attempt: int
    error_code: str | None
    error_detail: str | None
    started_at: datetime | None
    finished_at: datetime | None
    attempts: list[Attempt]
    branch_of: int | None = None
    position: int | None = None


@dataclass(frozen=True)
class AttemptLog:
    """What one attempt of a step logged and printed: ``text``, the newest bytes of it
    (UTF-8), ``truncated`` when older output was cut, ``total_bytes`` written in all."""

    step_id: int
    attempt: int
    text: str
    truncated: bool
    total_bytes: int
    created_at: datetime


@dataclass(frozen=True)
class Usage:
    """What a run used: calls, tokens, and USD as decimal strings (``cost_usd`` is
    ``None`` while a model call had no known price)."""

    model_calls: int
    tool_calls: int
    tokens: int
    cost_usd: str | None
    cost_usd_priced: str
    unpriced_model_calls: int


@dataclass(frozen=True)
class Budget:
    """A run's limits (``{"model_calls": 5, "cost_usd": "0.10"}``; an absent limit is
    none) and what it used."""

    limits: dict[str, Any]
    used: Usage


@dataclass(frozen=True)
class Parent:
    """Where a child run comes from: the parent ``run`` (id), its ``step`` that started
    this run, this run's ``position`` among that step's children (0-based), and
    ``detached`` when it may outlive its parent."""

    run: str
    step: str | None
    position: int | None
    detached: bool


@dataclass(frozen=True)
class Child:
    """A child run as its parent's document lists it: id, workflow, status, the
    parent's ``step`` that started it, its ``position`` there, ``detached``, and its
    ``error_code`` once it failed."""

    id: str
    workflow: str
    status: str
    step: str | None
    position: int | None
    detached: bool
    error_code: str | None


@dataclass(frozen=True)
class RunSummary:
    """A run as ``GET /runs`` lists it. ``etag`` is the run's entity tag: the client
    sends it as ``If-Match`` when it acts on a run it was given as this object.
    ``parent_run`` is the id of the run whose step started this one (``None`` for a
    run started otherwise)."""

    id: str
    etag: str
    thread_id: str
    workflow: str
    workflow_version: int
    status: str
    generation: int
    goal: str
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    error_code: str | None
    last_event_seq: int
    replay_of: str | None
    replay_checkpoint: str | None
    parent_run: str | None

    @property
    def terminal(self) -> bool:
        """Whether the run has finished (SUCCEEDED, FAILED or CANCELLED)."""
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True)
class Run(RunSummary):
    """A run as ``GET /runs/{id}`` answers it: the summary plus its input as started,
    the input it works with now (``effective_input``), next and current step, budget,
    the newest 100 steps (``steps_total`` counts all), the runs replaying it, where it
    comes from (``parent``, ``None`` unless it is a child run) and the first 100 child
    runs it started, by step and position (``children_total`` counts all;
    ``Client.list_runs(parent=...)`` pages through them). ``pause_progress``: while a
    pause is requested, where it stands (``pause requested, waiting for the running
    steps (4 running)``), else ``None``. ``error_detail``: why a failed run failed (the
    failing step's error, untrusted text), else ``None``.

    ``replayed`` is true when the answer was a replay of an earlier response to the
    same idempotency key (the header ``Idempotent-Replayed``); it is not part of the
    run and not compared."""

    input: dict[str, Any]
    effective_input: dict[str, Any]
    next_step: str | None
    current_step: str | None
    budget: Budget
    steps: list[Step]
    steps_total: int
    replays: list[str]
    parent: Parent | None
    children: list[Child]
    children_total: int
    pause_progress: str | None
    error_detail: str | None = None
    replayed: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class RunPage:
    """One page of ``GET /runs``: the runs, newest first, and the ``count`` of all that
    match the filters."""

    items: list[RunSummary]
    count: int
    limit: int
    offset: int


@dataclass(frozen=True)
class StepPage:
    """One page of a run's steps; pass ``next_after_seq`` on for the next (``None`` on
    the last page)."""

    items: list[Step]
    next_after_seq: int | None


@dataclass(frozen=True)
class Event:
    """One event of a run's log: ``seq`` is gap-free from 1 in the run (the stream's
    ``id:``), ``type`` e.g. ``step.succeeded``, ``actor`` e.g. ``user:alice``."""

    seq: int
    type: str
    step: str | None
    step_id: int | None
    actor: str
    payload: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class EventPage:
    """Events after a seq, the run's status and its ``last_seq`` to poll on from."""

    items: list[Event]
    run_status: str
    last_seq: int


@dataclass(frozen=True)
class Message:
    """A thread's message; ``status`` is ``draft`` while it is streamed, then
    ``final`` (or ``superseded`` when a later attempt replaced the draft)."""

    id: str
    seq: int
    role: str
    content: str
    tool_calls: list[Any]
    tool_call_id: str | None
    status: str
    run_id: str | None
    created_at: datetime


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint of a run; a ``resumable`` one can be named in ``Client.resume``."""

    id: int
    name: str
    generation: int
    step: str | None
    next_step: str | None
    resumable: bool
    created_at: datetime


@dataclass(frozen=True)
class Approval:
    """A question to a person before a step goes on; ``status`` is ``PENDING``,
    ``APPROVED``, ``REJECTED`` or ``EXPIRED``."""

    id: int
    run_id: str
    step: str
    question: str
    reason: str
    evidence: dict[str, Any]
    status: str
    decided_by: str | None
    decided_at: datetime | None
    comment: str
    expires_at: datetime | None
    created_at: datetime


@dataclass(frozen=True)
class Delivery:
    """What delivering a signal or a deferred tool result did: ``consumed`` when the
    waiting step took it (else it is kept for the run's next wait), ``duplicate`` when
    this request id delivered it before, and the run's status after it. ``replayed`` as
    for ``Run``."""

    signal: str
    request_id: str
    run_id: str
    consumed: bool
    duplicate: bool
    step: int | None
    run_status: str
    replayed: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class Replay:
    """The answer to a replay: the ``preview`` (``checkpoint``, ``steps_to_run``, side
    effects reused or that may repeat) and the new run (``None`` for a dry run).
    ``replayed`` as for ``Run``."""

    dry_run: bool
    preview: dict[str, Any]
    replay: Run | None
    replayed: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class BulkReplayed:
    """A run a bulk replay replayed: the original ``run``, its ``replay`` (the new
    run's id) and ``start_after_s``, the seconds after the request the replay starts."""

    run: str
    replay: str
    start_after_s: float


@dataclass(frozen=True)
class BulkSkipped:
    """A matching run a bulk replay left alone, with the ``code`` and ``message`` of
    why (``already_replayed``, ``unknown_checkpoint``, ...)."""

    run: str
    code: str
    message: str


@dataclass(frozen=True)
class BulkReplay:
    """The answer to a bulk replay: the replays ``created`` (none for a dry run), the
    runs ``skipped``, the ``previews`` of the runs it replays (or would), and the
    ``rate`` (replays started per second). ``replayed`` as for ``Run``."""

    dry_run: bool
    rate: float
    created: list[BulkReplayed]
    skipped: list[BulkSkipped]
    previews: list[dict[str, Any]]
    replayed: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class Tick:
    """One tick of a schedule: when, its ``outcome`` (``started``, ``skipped``, ...),
    the run it started, and whether a person triggered it."""

    tick_at: str
    outcome: str
    run: str | None
    manual: bool


@dataclass(frozen=True)
class Schedule:
    """A schedule of the deployment: its ``timing`` as text (``"every 60s"``, ``"0 9 * *
    1 (Asia/Tokyo)"``), the input of its runs, overlap and catch-up policies, the next
    three tick times (ISO text; empty while paused) and its last ticks, newest first."""

    name: str
    workflow: str
    timing: str
    input: dict[str, Any]
    overlap: str
    catchup: str
    paused: bool
    next_fire_times: list[str]
    last_ticks: list[Tick]


@dataclass(frozen=True)
class TickResult:
    """What triggering a schedule did: ``outcome`` ``started`` (with its ``run``) or
    ``skipped`` (the previous run is still open), and why. ``replayed`` as for ``Run``."""

    outcome: str
    run: str | None
    detail: str
    replayed: bool = field(default=False, compare=False)
