"""Demo data for trying and measuring the console (``python manage.py seed_demo``).

Builds a realistic mix of runs in every state, with their steps, attempts, events,
messages, checkpoints, operations, artifacts, approvals and takeovers, as the engine would
have left them, and writes everything with ``bulk_create`` (thousands of runs in seconds).
Where a scenario ends with a move of the engine, that move is then made by the engine's
own function on the written run: the unknown-version pause a worker makes
(``versions.pause_unknown_version``), the budget pause of the attempt holding the step
(``budget.pause_exhausted``) and an operator's cancel of a running step
(``cancel.request_cancel``).
Rows are consistent with the engine's rules: event seqs are gap-free per run, message seqs
per thread, at most one open takeover per run, terminal runs have finished steps.

Some payloads carry ``<script>`` and ``<img onerror>`` text on purpose: agent output is
untrusted and the console must show it as text.
"""

import hashlib
import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction

from runs.console.roles import setup_roles
from runs.engine.control import versions
from runs.engine.control.cancel import request_cancel
from runs.engine.effects.budget import BudgetExhausted, pause_exhausted
from runs.engine.state.clock import db_now
from runs.models import (
    Artifact,
    Checkpoint,
    Event,
    Message,
    Operation,
    Run,
    Step,
    Thread,
    WorkerProcess,
)
from runs.states import RunStatus, StepStatus
from runs.workflows.order_followup import PAYMENT_TIMEOUT_S

#: Demo users, one per role: ``{username: (role, password)}``.
DEMO_USERS = {
    "viewer": ("viewer", "viewer-demo-pw"),
    "operator": ("operator", "operator-demo-pw"),
    "approver": ("approver", "approver-demo-pw"),
}

WORKFLOW_STEPS = {
    "room_temperature": ["plan", "read_temperature", "reply"],
    "weekly_report": [
        "collect_sources",
        "deduplicate",
        "analyze",
        "draft_report",
        "approve_publication",
        "publish",
    ],
    "dim_lights": ["read_lamp", "plan", "set_brightness", "reply"],
    "order_followup": ["ask_payment", "await_payment", "schedule_followup", "reply"],
}
#: The workflows drawn for a run whose scenario names none.
DRAWN_WORKFLOWS = ["room_temperature", "weekly_report", "dim_lights"]
GOALS = {
    "room_temperature": "How warm is the living room?",
    "weekly_report": "Weekly report for 2026-W40",
    "dim_lights": "lower the brightness by 10%",
    "order_followup": "Follow up on the order once it is paid",
}
#: What a seeded ``waiting_external`` run waits for, and a payload that continues it:
#: ``runs signal RUN payment --payload '{"amount": 42.5}'`` (or the console's API).
DEMO_SIGNAL = "payment"
DEMO_SIGNAL_PAYLOAD = {"amount": 42.5}
#: The week of seeded weekly reports: not the tutorials' 2026-W48, so a seeded run that
#: a worker continues never holds the slot a tutorial run reserves.
DEMO_WEEK = "2026-W40"
#: Scenarios whose runs a worker continues by itself (due or lease-expired steps, or a
#: cancel to finish). They never use dim_lights: the tutorials' lamp is only touched
#: by an operator acting on a seeded run.
SELF_CONTINUING = {"running", "pending", "cancel_requested", "stuck", "lease_expired", "looping"}
HOSTILE = ['<script>alert("xss")</script>', "<img src=x onerror=alert(1)>"]

#: (scenario, weight): the mix of run situations.
SCENARIOS = [
    ("succeeded", 40),
    ("failed", 7),
    ("cancelled", 6),
    ("running", 8),
    ("pending", 5),
    ("waiting_approval", 6),
    ("unknown", 5),
    ("retries_exhausted", 4),
    ("budget", 3),
    ("version", 1),
    ("cancel_requested", 2),
    ("waiting_external", 2),
    ("stuck", 4),
    ("long_history", 3),
    ("looping", 2),
    ("lease_expired", 2),
]


@dataclass
class SeedReport:
    """What ``seed`` created: counts by run status and the demo users' passwords."""

    runs: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    events: int = 0
    users: dict[str, str] = field(default_factory=dict)
    #: ``{scenario: [run ids]}``; the first ``len(SCENARIOS)`` runs cover one each.
    scenarios: dict[str, list] = field(default_factory=dict)


def _input(workflow: str, goal: str, index: int) -> dict:
    """The run input the real workflow requires (``Workflow.input_fields``)."""
    if workflow == "order_followup":
        # No sleep after the payment: a delivered signal takes the run to its reply.
        return {"order": f"order-{index}", "delay_s": 0}
    if workflow == "weekly_report":
        return {"week": DEMO_WEEK}
    if workflow == "dim_lights":
        return {"request": goal}
    return {"question": goal}


class _ArtifactRef:
    """An artifact in a step output, before its row has an id: becomes
    ``{"name", "id", "sha256", "size"}`` when written (as ``draft_report`` returns)."""

    def __init__(self, artifact: Artifact):
        self.artifact = artifact


def _materialize(value):
    """``value`` with artifact rows replaced by their ids and ``_ArtifactRef`` by the
    dict a real step returns (called once every artifact row has its id)."""
    if isinstance(value, Artifact):
        return value.pk
    if isinstance(value, _ArtifactRef):
        a = value.artifact
        return {"name": a.name, "id": a.pk, "sha256": a.checksum, "size": a.size}
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_materialize(v) for v in value]
    return value


def _checkpoint(state: dict, **fields) -> Checkpoint:
    """An unsaved Checkpoint with ``fields`` holding the whole ``state`` (stored through
    its ``state`` setter, as ``Checkpoint(state=...)`` would)."""
    checkpoint = Checkpoint(**fields)
    checkpoint.state = state
    return checkpoint


def _state(b: "_RunBuilder", phase: str | None, message_seq: int) -> dict:
    """A checkpoint state in the engine's format (``runs.engine.state.checkpoints``)."""
    return {
        "phase": phase,
        "input": b.run.input,
        "completed": list(b.completed),
        "outputs": dict(b.outputs),
        "message_seq": message_seq,
        "artifacts": list(b.artifacts),
        "budget_used": {"model_calls": 0, "tool_calls": 0, "cost_usd": "0"},
        "workflow": b.run.workflow,
        "workflow_version": b.run.workflow_version,
        "generation": 1,
        "next_allowed": [phase] if phase else [],
        "pending_approval": None,
    }


class _RunBuilder:
    """Accumulates one run's rows in memory, with gap-free event seqs."""

    def __init__(self, seeder: "Seeder", run: Run, clock: datetime, pace: float = 1.0):
        self.seeder = seeder
        #: Scales the gaps between events: recent runs must not end in the future.
        self.pace = pace
        self.run = run
        self.clock = clock
        self.events: list[Event] = []
        self.steps: list[Step] = []
        self.step_events: list[tuple[int, Event]] = []  # (index in steps, event)
        self.scenario = ""
        #: Checkpoint state as the engine builds it: outputs by step, artifacts so far.
        self.outputs: dict = {}
        self.completed: list[str] = []
        self.artifacts: list[Artifact] = []

    def tick(self, low: float = 0.2, high: float = 8.0) -> datetime:
        self.clock += timedelta(seconds=self.seeder.rng.uniform(low, high) * self.pace)
        return self.clock

    def event(
        self,
        type: str,
        payload: dict | None = None,
        *,
        step_index: int | None = None,
        actor: str = "",
    ) -> None:
        event = Event(
            run_id=self.run.pk,
            seq=len(self.events) + 1,
            type=type,
            payload=payload or {},
            actor=actor,
            created_at=self.tick(),
        )
        self.events.append(event)
        if step_index is not None:
            self.step_events.append((step_index, event))

    def step(self, name: str, **fields) -> int:
        self.steps.append(
            Step(
                run_id=self.run.pk,
                name=name,
                seq=len(self.steps) + 1,
                created_at=self.clock,
                not_before=self.clock,
                **fields,
            )
        )
        return len(self.steps) - 1


class Seeder:
    """Generates ``runs`` demo runs with a fixed random ``seed`` (same input, same mix).

    The first runs take each scenario in turn (``scenarios``, default every one in
    ``SCENARIOS``), so even a small seed shows every situation; the rest are drawn by weight.
    """

    def __init__(
        self,
        runs: int,
        seed: int = 1,
        now: datetime | None = None,
        scenarios: list[str] | None = None,
    ):
        self.count = runs
        self.first = list(scenarios or [name for name, _ in SCENARIOS])
        self.rng = random.Random(seed)
        self.now = now or db_now()
        self.workers = [f"demo-host:{1000 + i}:w{i}" for i in range(3)]
        self.rows: dict[str, list] = {
            k: []
            for k in (
                "threads",
                "runs",
                "steps",
                "events",
                "messages",
                "checkpoints",
                "operations",
                "artifacts",
                "approvals",
                "takeovers",
            )
        }
        self.step_links: list[tuple[_RunBuilder, list]] = []

    # -- public ---------------------------------------------------------------------
    def seed(self) -> SeedReport:
        """Create users, roles and all rows in one transaction; returns the report."""
        report = SeedReport()
        with transaction.atomic():
            report.users = self._users()
            owners = list(get_user_model().objects.filter(username__in=DEMO_USERS))
            names, weights = zip(*SCENARIOS, strict=True)
            builders = []
            for index in range(self.count):
                scenario = (
                    self.first[index]
                    if index < len(self.first)
                    else self.rng.choices(names, weights)[0]
                )
                builders.append(self._build(scenario, index, self.rng.choice(owners)))
            self._write(builders)
            for builder in builders:
                self._engine_moves(builder)
        report.runs = len(builders)
        for builder in builders:
            report.scenarios.setdefault(builder.scenario, []).append(builder.run.pk)
            report.by_status[builder.run.status] = report.by_status.get(builder.run.status, 0) + 1
        report.events = sum(b.run.event_seq for b in builders)
        return report

    # -- users ----------------------------------------------------------------------
    def _users(self) -> dict[str, str]:
        groups = setup_roles()
        user_model = get_user_model()
        created = {}
        for username, (role, password) in DEMO_USERS.items():
            user, _ = user_model.objects.get_or_create(username=username)
            user.set_password(password)
            user.is_staff = role == "operator"
            user.save()
            user.groups.set([groups[role]])
            created[username] = password
        return created

    # -- one run --------------------------------------------------------------------
    def _build(self, scenario: str, index: int, owner) -> _RunBuilder:
        rng = self.rng
        workflow = {
            "waiting_approval": "weekly_report",
            "unknown": "dim_lights",
            "long_history": "room_temperature",
            "looping": "room_temperature",
            "waiting_external": "order_followup",
        }.get(scenario, rng.choice(DRAWN_WORKFLOWS))
        if scenario in SELF_CONTINUING and workflow == "dim_lights":
            workflow = "room_temperature"
        names = WORKFLOW_STEPS[workflow]
        age, pace = timedelta(minutes=rng.uniform(60, 3 * 24 * 60)), 1.0
        if scenario in ("running", "pending", "cancel_requested", "looping", "waiting_external"):
            # At most ~40 events of at most 8 s * pace each: they end before now.
            age, pace = timedelta(seconds=rng.uniform(90, 300)), 0.2
        created = self.now - age
        goal = GOALS[workflow] + (f" {HOSTILE[index % 2]}" if index % 25 == 0 else "")
        thread = Thread(owner=owner, thread_id=f"demo-{uuid.uuid4().hex[:10]}", created_at=created)
        self.rows["threads"].append(thread)
        run = Run(
            id=uuid.uuid4(),
            thread=thread,
            owner=owner,
            workflow=workflow,
            workflow_version=99 if scenario == "version" else 1,
            status=RunStatus.PENDING,
            input=_input(workflow, goal, index),
            goal=goal,
            budget={"model_calls": 10, "tool_calls": 5, "cost_usd": "0.50"},
            created_at=created,
            updated_at=created,
        )
        builder = _RunBuilder(self, run, created, pace)
        builder.scenario = scenario
        builder.event(
            "run.created",
            {"workflow": workflow, "version": run.workflow_version, "thread": thread.thread_id},
            actor="api",
        )
        messages: list[tuple[str, str, list, str]] = [("user", goal, [], "")]

        stop_at = {"succeeded": len(names), "long_history": len(names)}.get(
            scenario, rng.randrange(1, len(names)) if len(names) > 1 else 0
        )
        if scenario == "waiting_approval":
            stop_at = names.index("approve_publication")
        if scenario == "unknown":
            stop_at = names.index("set_brightness")
        if scenario == "waiting_external":
            stop_at = names.index("await_payment")
        if scenario in ("pending", "version"):
            stop_at = 0
        worker = rng.choice(self.workers)
        run.started_at = (
            builder.tick() if stop_at > 0 or scenario not in ("pending", "version") else None
        )
        if run.started_at:
            builder.event("run.running", {"from": "PENDING", "reason": ""}, actor=worker)
        # Completed steps before the interesting one.
        for name in names[:stop_at]:
            self._succeeded_step(
                builder, name, worker, messages, extra_attempts=1 if rng.random() < 0.1 else 0
            )
        if scenario == "long_history":
            for _ in range(60):
                self._succeeded_step(builder, "read_temperature", worker, messages)
        if scenario == "looping":
            for _ in range(6):
                self._succeeded_step(builder, "plan", worker, messages)
        self._finish(builder, scenario, names, stop_at, worker, messages)
        self._messages(builder, thread, messages)
        run.event_seq = len(builder.events)
        run.last_event_at = builder.events[-1].created_at
        run.updated_at = run.last_event_at
        run.model_calls = sum(1 for m in messages if m[0] == "assistant")
        run.tool_calls = sum(1 for m in messages if m[0] == "tool")
        run.cost_usd = Decimal("0.0021") * run.model_calls
        self.rows["runs"].append(run)
        return builder

    def _succeeded_step(
        self, b: _RunBuilder, name: str, worker: str, messages: list, extra_attempts: int = 0
    ) -> int:
        i = b.step(name, generation=1)
        step = b.steps[i]
        step.started_at = b.tick()
        b.event("step.scheduled", {"name": name, "seq": step.seq}, step_index=i, actor=worker)
        for attempt in range(1, extra_attempts + 1):
            b.event(
                "step.started", {"attempt": attempt, "worker": worker}, step_index=i, actor=worker
            )
            b.event(
                "step.retry_scheduled",
                {
                    "attempt": attempt,
                    "error_code": "RATE_LIMITED",
                    "error_detail": "429 from the model API",
                    "delay_s": 1.0,
                },
                step_index=i,
                actor=worker,
            )
        attempt = extra_attempts + 1
        b.event("step.started", {"attempt": attempt, "worker": worker}, step_index=i, actor=worker)
        b.event(
            "step.succeeded", {"attempt": attempt, "worker": worker}, step_index=i, actor=worker
        )
        step.status, step.attempt, step.owner = StepStatus.SUCCEEDED, attempt, worker
        step.finished_at = b.clock
        step.output = self._step_output(b, i, name, messages)
        b.outputs[name] = step.output
        b.completed.append(name)
        names = WORKFLOW_STEPS[b.run.workflow]
        later = names[names.index(name) + 1 :] if name in names else []
        b.event("checkpoint.saved", {"name": f"after:{name}"}, step_index=i, actor=worker)
        self.rows["checkpoints"].append(
            (
                b,
                i,
                _checkpoint(
                    _state(b, later[0] if later else None, len(messages)),
                    run_id=b.run.pk,
                    name=f"after:{name}",
                    generation=1,
                    created_at=b.clock,
                ),
            )
        )
        return i

    def _step_output(self, b: _RunBuilder, i: int, name: str, messages: list):
        """The output the real step returns, with the messages, ledger rows and
        artifacts it leaves, so a worker, a compensation or a resume can go on from it."""
        run = b.run
        call_id = f"call_{run.pk.hex[:8]}_{b.steps[i].seq}_0"
        if run.workflow == "room_temperature":
            if name == "plan":
                calls = [
                    {"id": call_id, "name": "thermostat.read", "arguments": {"room": "living room"}}
                ]
                messages.append(("assistant", "", calls, ""))
                return {"tool_calls": calls}
            if name == "read_temperature":
                call = b.outputs.get("plan", {}).get("tool_calls", [{}])[0]
                reading = {"room": "living room", "celsius": 23.5}
                messages.append(("tool", json.dumps(reading), [], call.get("id", call_id)))
                self._operation(b, i, "thermostat.read", "read", {"room": "living room"}, reading)
                return reading
            text = "It is 23.5 °C in the living room right now."
            if run.goal.endswith(tuple(HOSTILE)):
                text += " The page said: " + HOSTILE[0] + HOSTILE[1]
            messages.append(("assistant", text, [], ""))
            return {"answer": text, "message_id": f"msg_{run.pk.hex[:8]}_{len(messages)}"}
        if run.workflow == "order_followup":
            # ask_payment, the only step of an order a seeded run has finished.
            order = run.input["order"]
            messages.append(("assistant", f"Order {order}: waiting for the payment.", [], ""))
            return {"order": order}
        if run.workflow == "dim_lights":
            if name == "read_lamp":
                calls = [{"id": call_id, "name": "lamp.get_brightness", "arguments": {}}]
                messages.append(("assistant", "", calls, ""))
                messages.append(("tool", json.dumps({"brightness": 80}), [], call_id))
                self._operation(b, i, "lamp.get_brightness", "read", {}, {"brightness": 80})
                return {"brightness": 80}
            if name == "plan":
                calls = [
                    {"id": call_id, "name": "lamp.set_brightness", "arguments": {"brightness": 70}}
                ]
                messages.append(("assistant", "", calls, ""))
                return {"tool_calls": calls}
            if name == "set_brightness":
                call = b.outputs["plan"]["tool_calls"][0]
                outcome = {"brightness": 70, "previous": 80}
                self._operation(
                    b,
                    i,
                    "lamp.set_brightness",
                    "unsafe",
                    {"brightness": 70, "previous": 80},
                    outcome,
                )
                messages.append(("tool", json.dumps(outcome), [], call["id"]))
                return outcome
            text = "Done: the lamp went from 80% to 70% brightness."
            messages.append(("assistant", text, [], ""))
            return {"answer": text}
        return self._report_output(b, i, name)

    def _report_output(self, b: _RunBuilder, i: int, name: str):
        week = b.run.input["week"]
        if name == "collect_sources":
            slot = {"slot": week, "holder": str(b.run.pk)}
            self._operation(b, i, "publisher.reserve", "idempotent", {"week": week}, slot)
            sources = [
                {
                    "url": f"https://news.example/{week}/{n}",
                    "title": f"{t.title()} note {n}",
                    "topic": t,
                }
                for n, t in enumerate(["reliability", "costs", "agents", "evaluation"])
            ]
            self._operation(b, i, "newsfeed.fetch", "read", {"week": week}, sources)
            return {"sources": sources, "slot": slot}
        if name == "deduplicate":
            return {"sources": b.outputs["collect_sources"]["sources"], "dropped": 0}
        if name == "analyze":
            topics = {s["topic"]: 1 for s in b.outputs["deduplicate"]["sources"]}
            return {"topics": dict(sorted(topics.items())), "focus": "reliability"}
        if name == "draft_report":
            title = f"Weekly report {week}: reliability"
            refs = []
            for art_name, body in (
                ("sources.json", json.dumps(b.outputs["deduplicate"]["sources"])),
                ("report.md", f"# {title}\n\nAll quiet. {HOSTILE[1]}\n"),
            ):
                refs.append(_ArtifactRef(self._artifact(b, i, art_name, body.encode())))
            return {"title": title, "artifacts": refs}
        if name == "approve_publication":
            return {"decision": "approved", "by": "approver", "comment": "looks right"}
        if name == "publish":
            receipt = {
                "publication_id": f"pub-{b.run.pk.hex[:6]}",
                "title": b.outputs["draft_report"]["title"],
            }
            self._operation(
                b, i, "publisher.publish", "idempotent", {"title": receipt["title"]}, receipt
            )
            return {"published": True, "receipt": receipt}
        return {"published": False}

    def _operation(
        self,
        b: _RunBuilder,
        i: int,
        tool: str,
        side_effect: str,
        arguments: dict,
        result,
        status: str = Operation.Status.SUCCEEDED,
    ) -> None:
        """A ledger row under the key the engine uses (``<run>:g1:<step>:<tool>``), so a
        worker that runs the step again reuses it instead of calling again."""
        step = b.steps[i]
        key = f"{b.run.pk}:g1:{step.name}:{tool}"
        # A step name repeated in one generation (the long-history demo) is a new action.
        repeats = sum(1 for other in b.steps[:i] if other.name == step.name)
        self.rows["operations"].append(
            (
                b,
                i,
                Operation(
                    run_id=b.run.pk,
                    idempotency_key=f"{key}#{repeats}" if repeats else key,
                    tool=tool,
                    side_effect=side_effect,
                    arguments=arguments,
                    status=status,
                    result=result,
                    attempt=max(step.attempt, 1),
                    created_at=b.clock,
                    updated_at=b.clock,
                ),
            )
        )

    def _artifact(self, b: _RunBuilder, i: int, name: str, body: bytes) -> Artifact:
        path = default_storage.save(f"demo/{b.run.pk}/{name}", ContentFile(body))
        artifact = Artifact(
            run_id=b.run.pk,
            kind="report" if name.endswith(".md") else "data",
            name=name,
            uri=path,
            checksum=hashlib.sha256(body).hexdigest(),
            size=len(body),
            created_at=b.clock,
        )
        self.rows["artifacts"].append((b, i, artifact))
        b.artifacts.append(artifact)
        return artifact

    def _finish(
        self,
        b: _RunBuilder,
        scenario: str,
        names: list[str],
        stop_at: int,
        worker: str,
        messages: list,
    ) -> None:
        """Leave the run in the scenario's state, with the step that got it there."""
        run, rng = b.run, self.rng
        name = names[stop_at] if stop_at < len(names) else None

        def transition(target: str, actor: str = worker, **payload) -> None:
            b.event(f"run.{target.lower()}", {"from": run.status, **payload}, actor=actor)
            run.status = target
            run.version += 1

        if run.started_at:
            run.status, run.version = RunStatus.RUNNING, 1
        if scenario in ("succeeded", "long_history"):
            transition(RunStatus.SUCCEEDED)
            run.finished_at = b.clock
            return
        if scenario in ("pending", "version"):
            i = b.step(names[0], generation=1)
            b.event("step.scheduled", {"name": names[0], "seq": 1}, step_index=i, actor="api")
            # A "version" run is paused by the engine's own opener once written (seed).
            return
        if name is None:
            raise ValueError(f"scenario {scenario!r} stops after the last step of its run")
        i = b.step(name, generation=1)
        step = b.steps[i]
        step.started_at = b.tick()
        b.event("step.scheduled", {"name": name, "seq": step.seq}, step_index=i, actor=worker)
        b.event("step.started", {"attempt": 1, "worker": worker}, step_index=i, actor=worker)
        step.attempt, step.owner = 1, worker
        if scenario in ("running", "cancel_requested", "waiting_external", "looping"):
            step.status = StepStatus.RUNNING
            step.lease_until = self.now + timedelta(seconds=rng.uniform(5, 30))
            step.heartbeat_at = self.now
            # A cancel_requested run's cancel is asked through the engine once written.
            if scenario == "waiting_external":
                # As commit_signal_wait leaves it: the step waits for the signal with its
                # lease released, the run WAITING_EXTERNAL until the wait's deadline.
                b.event(
                    "step.waiting",
                    {
                        "attempt": 1,
                        "waiting_for": "signal",
                        "signal": DEMO_SIGNAL,
                        "timeout_s": PAYMENT_TIMEOUT_S,
                    },
                    step_index=i,
                    actor=worker,
                )
                step.status, step.owner = StepStatus.WAITING, ""
                step.lease_until, step.heartbeat_at = None, None
                step.signal_name = DEMO_SIGNAL
                step.wait_until = b.clock + timedelta(seconds=PAYMENT_TIMEOUT_S)
                transition(RunStatus.WAITING_EXTERNAL, reason=f"waiting for signal {DEMO_SIGNAL}")
        elif scenario in ("stuck", "lease_expired"):
            step.status = StepStatus.RUNNING
            step.lease_until = b.clock + timedelta(seconds=30)
            step.heartbeat_at = b.clock
            b.clock = self.now - timedelta(hours=rng.uniform(1, 5))
            if scenario == "stuck":
                run.stuck_since = self.now - timedelta(minutes=rng.uniform(10, 50))
                b.event("run.stuck", {"quiet_s": 3600}, actor="sweeper")
        elif scenario == "waiting_approval":
            step.status = StepStatus.WAITING
            transition(RunStatus.WAITING_APPROVAL, reason="needs approval before publishing")
            self._approval(b, i)
        elif scenario == "unknown":
            step.status = StepStatus.UNKNOWN
            step.error_code = "UNKNOWN_OUTCOME"
            step.error_detail = "lamp.set_brightness may have run; the worker died before saving"
            self._operation(
                b,
                i,
                "lamp.set_brightness",
                "unsafe",
                {"brightness": 70, "previous": 80},
                None,
                status=Operation.Status.UNKNOWN,
            )
            b.event("lease.expired", {"attempt": 1, "owner": worker}, step_index=i, actor="sweeper")
            b.event(
                "step.started",
                {"attempt": 2, "worker": self.workers[0]},
                step_index=i,
                actor=self.workers[0],
            )
            b.event(
                "step.unknown",
                {
                    "attempt": 2,
                    "error_code": "UNKNOWN_OUTCOME",
                    "error_detail": "verify: cannot tell",
                },
                step_index=i,
                actor=self.workers[0],
            )
            step.attempt = 2
            transition(RunStatus.PAUSED, reason="outcome unknown", cause="unknown_outcome")
            self._takeover(
                b,
                i,
                "unknown_outcome",
                "lamp.set_brightness: outcome unknown",
                "Check the lamp, then resolve done or not done.",
            )
        elif scenario == "budget":
            # Its attempt holds the step until the engine pauses it (seed): the call
            # that would pass the limit is not made, the step goes PENDING again.
            step.status, step.owner = StepStatus.RUNNING, worker
            step.lease_until = self.now + timedelta(minutes=10)
            step.heartbeat_at = b.clock
        elif scenario in ("failed", "retries_exhausted"):
            code = "DEPENDENCY_UNAVAILABLE"
            attempts = 3
            for attempt in range(1, attempts):
                b.event(
                    "step.retry_scheduled",
                    {
                        "attempt": attempt,
                        "error_code": code,
                        "error_detail": "503 Service Unavailable",
                        "delay_s": 2.0**attempt,
                    },
                    step_index=i,
                    actor=worker,
                )
                b.event(
                    "step.started",
                    {"attempt": attempt + 1, "worker": worker},
                    step_index=i,
                    actor=worker,
                )
            detail = f"503 Service Unavailable {HOSTILE[0]}"
            b.event(
                "step.failed",
                {"attempt": attempts, "error_code": code, "error_detail": detail},
                step_index=i,
                actor=worker,
            )
            step.status, step.attempt, step.error_code, step.error_detail = (
                StepStatus.FAILED,
                attempts,
                code,
                detail,
            )
            step.finished_at, step.owner = b.clock, ""
            if scenario == "failed":
                transition(RunStatus.FAILED, reason=f"{name}: {code}")
                run.finished_at, run.error_code, run.error_detail = b.clock, code, detail
            else:
                transition(RunStatus.PAUSED, reason=detail, cause="retries_exhausted")
                self._takeover(
                    b,
                    i,
                    "retries_exhausted",
                    f"{name} failed: {code}",
                    "Check the dependency, then retry the step.",
                )
        elif scenario == "cancelled":
            run.cancel_requested_at = b.tick()
            transition(RunStatus.CANCEL_REQUESTED, actor="user:operator", reason="no longer needed")
            b.event(
                "step.cancelled",
                {"attempt": 1, "reason": "cancel requested"},
                step_index=i,
                actor=worker,
            )
            step.status, step.finished_at, step.owner = StepStatus.CANCELLED, b.clock, ""
            transition(RunStatus.CANCELLED)
            run.finished_at = b.clock

    def _engine_moves(self, b: _RunBuilder) -> None:
        """The last move of a written run, made by the engine's own function where the
        scenario ends with one: the unknown-version pause a worker makes on reaching a
        version this code lacks, the budget pause of the attempt holding the step, an
        operator's cancel of a running step."""
        run, step = b.run, (b.steps[-1] if b.steps else None)
        if b.scenario == "version" and step is not None:
            versions.pause_unknown_version(run, step, self.workers[0])
        elif b.scenario == "budget" and step is not None:
            exhausted = BudgetExhausted("tool_calls", "tool_calls limit 5 reached (used 5)")
            pause_exhausted(run, step, step.attempt, step.owner, exhausted)
        elif b.scenario == "cancel_requested":
            request_cancel(run, actor="user:operator", reason="customer withdrew the request")
        else:
            return
        run.refresh_from_db(
            fields=["status", "version", "event_seq", "updated_at", "cancel_requested_at"]
        )

    def _approval(self, b: _RunBuilder, i: int) -> None:
        from runs.models import Approval

        created = b.clock - timedelta(hours=self.rng.choice([0, 0, 2, 30]))
        self.rows["approvals"].append(
            (
                b,
                i,
                Approval(
                    run_id=b.run.pk,
                    question=f'Publish "{b.outputs["draft_report"]["title"]}"?',
                    reason=f"publishing is not compensable {HOSTILE[0]}",
                    evidence={
                        "artifacts": b.outputs["draft_report"]["artifacts"],
                        "report_excerpt": f"All quiet. {HOSTILE[1]}",
                    },
                    created_at=created,
                    routes={
                        "approve": "publish",
                        "reject": "shelve_draft",
                        "expire": "shelve_draft",
                    },
                    # A pending approval is never past its deadline (the sweeper would
                    # have expired it): the old ones were asked without one, and are
                    # overdue in triage by their age.
                    expires_at=(
                        created + timedelta(hours=24)
                        if created + timedelta(hours=24) > self.now
                        else None
                    ),
                ),
            )
        )

    def _takeover(self, b: _RunBuilder, i: int, cause: str, reason: str, suggested: str) -> None:
        from runs.models import Takeover

        step = b.steps[i]
        b.event(
            "takeover.opened",
            {"cause": cause, "reason": reason, "step": step.name, "suggested_action": suggested},
            step_index=i,
            actor=step.owner or "worker",
        )
        self.rows["takeovers"].append(
            (
                b,
                i,
                Takeover(
                    run_id=b.run.pk,
                    cause=cause,
                    reason=reason,
                    failed_at=step.name,
                    suggested_action=suggested,
                    done_summary={"completed_steps": [s.name for s in b.steps[:i]]},
                    evidence={"error_code": step.error_code, "error_detail": step.error_detail},
                    checkpoints=["start", *(f"after:{s.name}" for s in b.steps[:i])],
                    created_at=b.clock,
                ),
            )
        )

    def _messages(self, b: _RunBuilder, thread: Thread, messages: list) -> None:
        for seq, (role, content, tool_calls, tool_call_id) in enumerate(messages, start=1):
            self.rows["messages"].append(
                (
                    b,
                    Message(
                        thread=thread,
                        run_id=b.run.pk,
                        seq=seq,
                        message_id=f"msg_{b.run.pk.hex[:8]}_{seq}",
                        role=role,
                        content=content,
                        tool_calls=tool_calls,
                        tool_call_id=tool_call_id,
                        created_at=b.run.created_at,
                    ),
                )
            )
        thread.message_seq = len(messages)

    # -- writing --------------------------------------------------------------------
    def _write(self, builders: list[_RunBuilder]) -> None:
        from runs.models import Approval, Takeover

        Thread.objects.bulk_create(self.rows["threads"], batch_size=1000)
        for builder in builders:
            builder.run.thread_id = builder.run.thread.pk
        Run.objects.bulk_create([b.run for b in builders], batch_size=1000)
        # Artifacts first (their step is set below): step outputs, checkpoints and
        # approval evidence refer to them by id, as the engine's rows do.
        artifacts = [row for _, _, row in self.rows["artifacts"]]
        Artifact.objects.bulk_create(artifacts, batch_size=1000)
        steps = [s for b in builders for s in b.steps]
        for step in steps:
            step.output = _materialize(step.output)
        Step.objects.bulk_create(steps, batch_size=1000)
        for builder, index, artifact in self.rows["artifacts"]:
            artifact.step_id = builder.steps[index].pk
        Artifact.objects.bulk_update(artifacts, ["step"], batch_size=1000)
        for builder in builders:
            for index, event in builder.step_events:
                event.step_id = builder.steps[index].pk
            if builder.steps:
                builder.run.current_step_id = builder.steps[-1].pk
        Run.objects.bulk_update(
            [b.run for b in builders if b.steps], ["current_step"], batch_size=1000
        )
        Event.objects.bulk_create([e for b in builders for e in b.events], batch_size=2000)
        self.rows["events"] = [e for b in builders for e in b.events]
        Message.objects.bulk_create([m for _, m in self.rows["messages"]], batch_size=1000)
        Checkpoint.objects.bulk_create(
            [
                _checkpoint(
                    {
                        **_state(_RunBuilder(self, b.run, b.run.created_at), None, 1),
                        "phase": WORKFLOW_STEPS[b.run.workflow][0],
                        "next_allowed": [WORKFLOW_STEPS[b.run.workflow][0]],
                    },
                    run_id=b.run.pk,
                    name="start",
                    generation=1,
                    created_at=b.run.created_at,
                )
                for b in builders
            ]
        )
        for model, key in (
            (Checkpoint, "checkpoints"),
            (Operation, "operations"),
            (Approval, "approvals"),
            (Takeover, "takeovers"),
        ):
            rows = []
            for builder, index, row in self.rows[key]:
                row.step_id = builder.steps[index].pk
                if model is Checkpoint:
                    row.state = _materialize(row.state)
                elif model is Approval:
                    row.evidence = _materialize(row.evidence)
                rows.append(row)
            model.objects.bulk_create(rows, batch_size=1000)
        WorkerProcess.objects.bulk_create(
            [
                WorkerProcess(
                    worker_id=w,
                    host="demo-host",
                    pid=1000 + i,
                    mode="db",
                    queues="default",
                    started_at=self.now - timedelta(hours=2),
                    heartbeat_at=self.now - timedelta(seconds=2 if i else 90),
                )
                for i, w in enumerate(self.workers)
            ],
            ignore_conflicts=True,
        )


def seed(runs: int, seed: int = 1) -> SeedReport:
    """Create the demo users and ``runs`` demo runs; see the module docstring."""
    return Seeder(runs, seed).seed()
