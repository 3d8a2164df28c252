"""The workflow-definition API: a workflow is a name, a version and ordered steps.

Example::

    workflow = Workflow("room_temperature", version=1)

    @workflow.step()
    def plan(ctx): ...

    @workflow.step(retry=RetryPolicy(max_attempts=5))
    def read_temperature(ctx): ...

Steps run in declaration order unless a step calls ``ctx.goto(name)`` (``None`` ends the
run). A step's return value (JSON-serializable) is its output, stored on the step and in
the checkpoint ``after:<step>``; later steps read it as ``ctx.outputs[name]``.
"""

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from runs.engine.durations import MAX_SECONDS, duration_problem
from runs.engine.effects.retry import DEFAULT_RETRY, RetryPolicy
from runs.engine.names import name_problem
from runs.engine.rules import NOT_A_NUMBER, TRUE_FALSE, number_problem

#: Most items one map step may fan out into (a longer list fails the step with
#: ``TOO_MANY_BRANCHES``).
MAX_BRANCHES = 10_000


class WorkflowDefinitionError(Exception):
    """Raised for a malformed workflow definition (duplicate or unknown step names)."""


@dataclass(frozen=True)
class StepDef:
    """One declared step.

    ``kind``: ``"task"`` (runs ``fn``), ``"approval"`` (``fn(ctx)`` returns the request
    ``{"question", "reason", "evidence"}``, then the run waits for a human decision; see
    ``Workflow.approval``), ``"signal"`` (the run waits for a named signal; see
    ``Workflow.signal``), ``"map"`` (fans out into one branch per item; see
    ``Workflow.map``) or ``"child"`` (starts child runs and waits for them; see
    ``Workflow.child``).
    ``timeout``: seconds a model or tool call in this step may take before TIMEOUT.
    ``on_exhausted``: ``"fail"`` the run or ``"takeover"`` (pause for a human) when the
    retry policy runs out. ``compensate``: ``fn(ctx, output)`` undoing this step's effect
    when the run later fails or is cancelled; ``compensable=False`` flags an action that
    cannot be undone (listed for manual review). ``final``: the run ends after this step
    (unless it calls ``ctx.goto``), for a step declared before an alternative path.
    ``options``: kind-specific settings (approval routes and expiry; a signal's name,
    schema, timeout and timeout route; a child step's workflow, ``many``, ``thread``
    and ``detached``).
    ``model``: the model this step's ``ctx.call_model`` asks (``openai:gpt-4.1-mini``);
    ``None`` means the workflow's, else ``AGENTOPS_MODEL``.
    ``rate_limit``: the name of a limit in ``AGENTOPS_RATE_LIMITS``; each attempt of the
    step waits for a place in that limit's window before its code runs (the wait counts
    no retry and keeps the lease).
    ``concurrency_key``: the run's input key (a dotted path) or a function
    ``fn(input) -> str`` naming what this step shares across runs, and
    ``concurrency_limit`` (default 1 with a key): how many steps of one key may be
    RUNNING at once; the others stay PENDING (no attempt counted) and are claimed in
    order. The rule for a key's value is the workflow's (``Workflow``); a run whose
    input gives no value is refused at start. Not on map steps.
    """

    name: str
    fn: Callable[..., Any]
    kind: str = "task"
    retry: RetryPolicy = DEFAULT_RETRY
    timeout: float | None = None
    on_exhausted: str = "fail"
    compensate: Callable[..., Any] | None = None
    compensable: bool = True
    final: bool = False
    options: dict = field(default_factory=dict)
    model: str | None = None
    rate_limit: str | None = None
    concurrency_key: str | Callable[[dict], Any] | None = None
    concurrency_limit: int | None = None


def key_value(spec: str | Callable[[dict], Any], data: dict) -> str | None:
    """The value a concurrency key ``spec`` (a dotted path into ``data`` or a function
    ``fn(data)``) names in the input ``data``: its text, or ``None`` when there is none
    (a missing path; a value that is not a non-empty string or an integer, or longer
    than 200 characters; a function that raises)."""
    if callable(spec):
        try:
            value = spec(data)
        except Exception:  # noqa: BLE001 - an author's function: a refused key, not a crash
            return None
    else:
        value = data
        for part in spec.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value).strip()
    return text if text and len(text) <= 200 else None


def _limit_problem(limit: Any, key: Any) -> str | None:
    if limit is not None and number_problem(limit, integer=True, minimum=1) is not None:
        return "concurrency_limit must be an integer >= 1"
    if limit is not None and key is None:
        return "concurrency_limit needs a concurrency_key"
    return None


def _types(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


class Workflow:
    """A named, versioned sequence of steps, registered with ``runs.workflows.registry``.

    ``migrate_from``: optional ``{old_version: fn(state) -> state}`` that upgrades a
    checkpoint of an older version of this workflow to this version.
    ``on_budget_exhausted``: ``"takeover"`` (pause the run for a human to raise the
    budget) or ``"fail"`` (fail the run and compensate).
    ``model``: the model its steps ask (``None``: ``AGENTOPS_MODEL``).
    ``internal``: a fixture of the benchmark or drills, left out of the ``workflows``
    listing unless ``--all`` (it still runs like any other).
    ``input_ranges``: ``{key: (low, high)}`` inclusive bounds of numeric input fields
    (an input that becomes a duration is bounded, e.g. by ``durations.MAX_SECONDS``).
    ``concurrency_key``: the input key (a dotted path such as ``"customer.id"``) or a
    function ``fn(input) -> str`` naming what runs of this workflow share, and
    ``concurrency_limit`` (default 1 with a key): how many runs of one key may be in
    flight at once; the others wait in PENDING and start in order of creation. A run
    whose input has no such value is refused at start (``invalid_input``).
    """

    def __init__(
        self,
        name: str,
        version: int,
        description: str = "",
        migrate_from: dict[int, Callable[[dict], dict]] | None = None,
        input_fields: dict[str, type | tuple[type, ...]] | None = None,
        input_ranges: dict[str, tuple[float, float]] | None = None,
        message_field: str | None = None,
        on_budget_exhausted: str = "takeover",
        model: str | None = None,
        internal: bool = False,
        concurrency_key: str | Callable[[dict], Any] | None = None,
        concurrency_limit: int | None = None,
    ):
        if reason := _limit_problem(concurrency_limit, concurrency_key):
            raise WorkflowDefinitionError(f"{name}: {reason}")
        self.concurrency_key = concurrency_key
        self.concurrency_limit = concurrency_limit or (1 if concurrency_key is not None else None)
        if on_budget_exhausted not in ("takeover", "fail"):
            raise WorkflowDefinitionError(f"{name}: on_budget_exhausted must be takeover or fail")
        self.on_budget_exhausted = on_budget_exhausted
        self.model = model
        self.internal = internal
        self.name = name
        self.version = version
        self.description = description
        self.migrate_from = dict(migrate_from or {})
        #: Required input keys and their types (a tuple: any of them), checked by
        #: ``validate_input``.
        self.input_fields = dict(input_fields or {})
        #: Inclusive bounds of numeric input keys, checked by ``validate_input``.
        self.input_ranges = dict(input_ranges or {})
        #: Input key whose text becomes the run's first user message (and its goal).
        self.message_field = message_field
        self.steps: list[StepDef] = []
        self._by_name: dict[str, StepDef] = {}

    def __repr__(self) -> str:
        return f"<Workflow {self.name}@{self.version}>"

    def validate_input(self, data) -> dict[str, str]:
        """Field errors of ``data`` as ``{field: message}`` (empty when valid)."""
        if not isinstance(data, dict):
            return {"input": "must be a JSON object"}
        errors = {}
        for key, kind in self.input_fields.items():
            if key not in data:
                errors[key] = "is required"
            elif (
                not isinstance(data[key], kind)
                # JSON's true/false are Python ints: a number field refuses them.
                or (bool not in _types(kind) and number_problem(data[key]) == TRUE_FALSE)
                or (kind is str and not data[key].strip())
            ):
                errors[key] = (
                    f"must be a non-empty {kind.__name__}"
                    if kind is str
                    else f"must be {' or '.join(k.__name__ for k in _types(kind))}"
                )
        for key, (low, high) in self.input_ranges.items():
            found = number_problem(data.get(key), minimum=low, maximum=high)
            # Not a number at all is the type check's answer (or no rule, if untyped).
            if key not in errors and found not in (None, TRUE_FALSE, NOT_A_NUMBER):
                errors[key] = f"must be from {low} to {high}"
        for step in self.steps:
            if not errors and step.concurrency_key and self.step_concurrency_of(step, data) is None:
                path = step.concurrency_key if isinstance(step.concurrency_key, str) else "input"
                errors[path] = f"must give the concurrency key of step {step.name!r}"
        return errors

    def concurrency_of(self, data: dict) -> tuple[str, int | None] | None:
        """``(key, limit)`` of a run with input ``data``: ``("", None)`` when the
        workflow declares no concurrency key, ``None`` when it declares one that
        ``data`` does not give (a missing path, or a value that is not a non-empty
        string or an integer: the run cannot start)."""
        if self.concurrency_key is None:
            return "", None
        text = key_value(self.concurrency_key, data)
        return None if text is None else (f"{self.name}:{text}", self.concurrency_limit)

    def step_concurrency_of(
        self, step: StepDef, data: dict
    ) -> tuple[str | None, int | None] | None:
        """``(key, limit)`` of ``step`` in a run with input ``data``
        (``"<workflow>.<step>:<value>"``): ``(None, None)`` when the step declares no
        concurrency key, ``None`` when ``data`` does not give its value (``key_value``)."""
        if step.concurrency_key is None:
            return None, None
        text = key_value(step.concurrency_key, data) if isinstance(data, dict) else None
        if text is None:
            return None
        return f"{self.name}.{step.name}:{text}", step.concurrency_limit

    def step(self, name: str | None = None, **options: Any) -> Callable:
        """Decorator declaring the next step; keyword options are ``StepDef`` fields."""

        def decorator(fn: Callable) -> Callable:
            self.add_step(StepDef(name=name or fn.__name__, fn=fn, **options))
            return fn

        return decorator

    def approval(
        self,
        name: str | None = None,
        *,
        on_reject: str | None = None,
        on_expire: str | None = None,
        expires_after: float | None = None,
        **options: Any,
    ) -> Callable:
        """Decorator declaring an approval step. The function ``fn(ctx)`` returns
        ``{"question": str, "reason": str, "evidence": dict}``; the run then waits in
        WAITING_APPROVAL with no lease held. Approve continues with the next declared step;
        reject goes to ``on_reject`` (``None``: the run fails with APPROVAL_REJECTED);
        expiry after ``expires_after`` seconds (default ``AGENTOPS_APPROVAL_EXPIRY_SECONDS``,
        0 = never) goes to ``on_expire`` (default: the reject path). Raises
        ``WorkflowDefinitionError`` for an ``expires_after`` that is not a number of
        seconds from 0 to ``durations.MAX_SECONDS``.
        """
        if expires_after is not None and (reason := duration_problem(expires_after)):
            raise WorkflowDefinitionError(f"{self.name}: expires_after {reason}")
        approval_options = {
            "on_reject": on_reject,
            "on_expire": on_expire,
            "expires_after": expires_after,
        }

        def decorator(fn: Callable) -> Callable:
            self.add_step(
                StepDef(
                    name=name or fn.__name__,
                    fn=fn,
                    kind="approval",
                    options=approval_options,
                    **options,
                )
            )
            return fn

        return decorator

    def signal(
        self,
        signal: str,
        name: str | None = None,
        *,
        schema: dict[str, Any] | None = None,
        timeout: float | None = None,
        on_timeout: str | None = None,
        **options: Any,
    ) -> Callable:
        """Decorator declaring a step that waits for the signal named ``signal``. The
        function ``fn(ctx)`` runs first (its return value is ignored); then the run waits
        in WAITING_EXTERNAL with no lease held until the signal comes, and the step's
        output is ``{"signal": signal, "payload": {...}, "request_id": str}`` for the
        next declared step to read (``ctx.outputs[name]``). ``schema``: the JSON
        Schema a payload must match (a bad one is refused, nothing changes).
        ``timeout`` (seconds, ``None``: wait forever): then the step ends with
        ``{"signal": signal, "timed_out": True}`` and the run goes to ``on_timeout``
        (``None``: the run fails with SIGNAL_TIMEOUT). Raises
        ``WorkflowDefinitionError`` for a signal name outside ``runs.engine.names``, a
        schema that is not a valid JSON Schema or a timeout that is not a number of
        seconds above 0 and at most ``durations.MAX_SECONDS``.
        """
        reason = name_problem(signal)
        if reason is not None:
            raise WorkflowDefinitionError(f"{self.name}: signal name {signal!r} {reason}")
        if schema is not None:
            import jsonschema_rs

            try:
                jsonschema_rs.meta.validate(schema)
            except jsonschema_rs.ValidationError as exc:
                raise WorkflowDefinitionError(
                    f"{self.name}: schema of signal {signal!r}: {exc.message}"
                ) from None
        if timeout is not None and (duration_problem(timeout) is not None or not timeout > 0):
            raise WorkflowDefinitionError(
                f"{self.name}: signal {signal!r} timeout must be seconds above 0 "
                f"and at most {MAX_SECONDS}"
            )
        signal_options = {
            "signal": signal,
            "schema": schema,
            "timeout": timeout,
            "on_timeout": on_timeout,
        }

        def decorator(fn: Callable) -> Callable:
            self.add_step(
                StepDef(
                    name=name or fn.__name__,
                    fn=fn,
                    kind="signal",
                    options=signal_options,
                    **options,
                )
            )
            return fn

        return decorator

    def child(
        self,
        workflow: str,
        name: str | None = None,
        *,
        many: bool = False,
        thread: str = "own",
        detached: bool = False,
        **options: Any,
    ) -> Callable:
        """Decorator declaring a step that starts child runs of the registered workflow
        ``workflow`` (latest version). The function ``fn(ctx)`` returns the child's
        input (a dict), or with ``many`` a list of inputs, one child each (position 0,
        1, ...). The run then waits in WAITING_EXTERNAL with no lease held until every
        child is finished; the step's output is the child's result (the output of the
        step that finished it), with ``many`` their list in position order. A child
        that fails or is cancelled fails the step and the run with the child's error
        code. ``thread``: ``"own"`` (a thread per child, ``<run id>/<step>/<position>``)
        or ``"parent"`` (the parent run's thread). ``detached``: the step does not wait
        (its output is ``{"children": [run ids]}``) and the children outlive the
        parent; otherwise they are cancelled when the parent ends first. Raises
        ``WorkflowDefinitionError`` for a bad workflow name or ``thread``.
        """
        reason = name_problem(workflow)
        if reason is not None:
            raise WorkflowDefinitionError(f"{self.name}: child workflow {workflow!r} {reason}")
        if thread not in ("own", "parent"):
            raise WorkflowDefinitionError(f"{self.name}: child thread must be own or parent")
        child_options = {
            "workflow": workflow,
            "many": many,
            "thread": thread,
            "detached": detached,
        }

        def decorator(fn: Callable) -> Callable:
            self.add_step(
                StepDef(
                    name=name or fn.__name__, fn=fn, kind="child", options=child_options, **options
                )
            )
            return fn

        return decorator

    def map(
        self,
        name: str | None = None,
        *,
        over: Callable[[Any], Any],
        on_failure: str = "fail",
        **options: Any,
    ) -> Callable:
        """Decorator declaring a map step: ``over(ctx)`` returns the list of items (JSON
        values; at most ``MAX_BRANCHES``), then the step fans out into one branch per
        item, each a step row of its own (attempts, retries under this step's policy,
        ledger keys from the step and its position) running ``fn(ctx)`` with
        ``ctx.item`` and ``ctx.position`` on any worker and slot. Once every branch has
        finished, the step's output is the list of the branches' results in input
        order and the run goes on with the next declared step (the join), which reads
        it as ``ctx.outputs[name]``. ``on_failure``: ``"fail"`` (a branch failing after
        its retries fails the run, the open branches are cancelled) or ``"partial"``
        (the output becomes ``{"results": [...], "failed": [{"position", "item",
        "error_code", "error_detail"}]}`` with ``None`` at a failed item's position).
        Raises ``WorkflowDefinitionError`` for an ``over`` that is not callable or
        another ``on_failure``."""
        if not callable(over):
            raise WorkflowDefinitionError(f"{self.name}: map step over= must be callable")
        if on_failure not in ("fail", "partial"):
            raise WorkflowDefinitionError(f"{self.name}: map on_failure must be fail or partial")

        def decorator(fn: Callable) -> Callable:
            self.add_step(
                StepDef(
                    name=name or fn.__name__,
                    fn=fn,
                    kind="map",
                    options={"over": over, "on_failure": on_failure},
                    **options,
                )
            )
            return fn

        return decorator

    def signal_steps(self, signal: str) -> list[StepDef]:
        """The steps that wait for the signal named ``signal`` (empty if none)."""
        return [s for s in self.steps if s.kind == "signal" and s.options["signal"] == signal]

    def add_step(self, step: StepDef) -> None:
        """Append ``step``; raises ``WorkflowDefinitionError`` on a duplicate name, an
        ``on_exhausted`` other than ``fail``/``takeover`` or a ``timeout`` that is not a
        number of seconds from 0 to ``durations.MAX_SECONDS``."""
        if step.timeout is not None and (reason := duration_problem(step.timeout)):
            raise WorkflowDefinitionError(f"{self.name}: step {step.name!r} timeout {reason}")
        if step.on_exhausted not in ("fail", "takeover"):
            raise WorkflowDefinitionError(
                f"{self.name}: step {step.name!r} on_exhausted must be fail or takeover"
            )
        if reason := _limit_problem(step.concurrency_limit, step.concurrency_key):
            raise WorkflowDefinitionError(f"{self.name}: step {step.name!r} {reason}")
        key = step.concurrency_key
        if key is not None and not (callable(key) or (isinstance(key, str) and key)):
            raise WorkflowDefinitionError(
                f"{self.name}: step {step.name!r} concurrency_key must be an input path "
                "or a function"
            )
        if step.concurrency_key is not None and step.kind == "map":
            # Its branches would need a place each across runs: not built yet.
            raise WorkflowDefinitionError(
                f"{self.name}: map step {step.name!r} takes no concurrency_key"
            )
        if step.concurrency_key is not None and step.concurrency_limit is None:
            step = replace(step, concurrency_limit=1)
        if step.name in self._by_name:
            raise WorkflowDefinitionError(f"{self.name}: step {step.name!r} declared twice")
        self.steps.append(step)
        self._by_name[step.name] = step

    @property
    def first_step(self) -> str:
        if not self.steps:
            raise WorkflowDefinitionError(f"{self.name} has no steps")
        return self.steps[0].name

    def get(self, name: str) -> StepDef:
        """The step called ``name``; raises ``WorkflowDefinitionError`` if undeclared."""
        try:
            return self._by_name[name]
        except KeyError:
            raise WorkflowDefinitionError(
                f"{self.name}@{self.version} has no step {name!r}"
            ) from None

    def has(self, name: str) -> bool:
        return name in self._by_name

    def next_after(self, name: str) -> str | None:
        """The step declared after ``name``, or ``None`` if it is the last or ``final``."""
        if self.get(name).final:
            return None
        names = [s.name for s in self.steps]
        index = names.index(name)
        return names[index + 1] if index + 1 < len(names) else None

    def path_from(self, name: str | None) -> list[str]:
        """The steps that run from ``name`` on when nobody calls ``goto`` and every
        approval is approved (what a resume preview shows)."""
        path: list[str] = []
        while name is not None and name not in path:
            path.append(name)
            name = self.next_after(name)
        return path
