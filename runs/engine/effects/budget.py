"""Run budgets: each model or tool call is charged to the run as it happens, with a
conditional UPDATE that refuses a charge that would pass the limit.

A child run's usage is charged to its parent too (and to the parent's parent): a
parent's budget is the limit over its whole family. A charge that one of them refuses
is charged to none of them and stops the child as its own budget would.
"""

import re
from decimal import Decimal, InvalidOperation
from functools import partial

from django.db import transaction
from django.db.models import F, Q

from runs.engine.control.refusals import ControlError, require_reason
from runs.engine.control.takeovers import open_takeover
from runs.engine.errors import StepError
from runs.engine.rules import NOT_WHOLE, TRUE_FALSE, number_from_text, number_problem
from runs.engine.state.gateway import run_transaction
from runs.engine.state.store import store
from runs.engine.state.store_interface import Due, Resolution
from runs.models import Run, Step, Takeover
from runs.states import RUN_TERMINAL, RunStatus, StepStatus

#: ``Run.budget`` keys and the usage column each limits.
LIMIT_FIELDS = {
    "model_calls": "model_calls",
    "tool_calls": "tool_calls",
    "cost_usd": "cost_usd",
    "tokens": "tokens",
}


#: Largest value of a limit, and of one addition to it, per ``Run.budget`` key (calls and
#: tokens are counts, ``cost_usd`` is USD). Every channel (API, CLI, console) checks
#: amounts with ``parse_amount`` / ``limit_errors`` so they all accept the same values.
MAX_AMOUNTS = {
    "model_calls": Decimal(1_000_000),
    "tool_calls": Decimal(1_000_000),
    "tokens": Decimal(10**12),
    "cost_usd": Decimal(1_000_000),
}
#: Most decimal places of a USD amount (the ``cost_usd`` column's precision).
COST_PLACES = 6


_USD_TEXT = re.compile(r"[0-9]+(\.[0-9]+)?", re.ASCII)


def parse_amount(key: str, value) -> Decimal:
    """``value`` as an amount for the limit ``key`` (a key of ``LIMIT_FIELDS``): counts
    (calls, tokens) are whole JSON numbers (an ``int``; never a bool, a float, or text
    such as ``"5"``: a text face turns what was typed into a number first,
    ``amount_from_text``); ``cost_usd`` is a finite USD amount (a number, or a decimal
    string of ASCII digits such as ``"0.05"``) with at most ``COST_PLACES`` places.
    Both between 0 and ``MAX_AMOUNTS[key]``.

    Raises ``ValueError`` with a message for people (``"must be at most 1000000"``).
    """
    if number_problem(value) == TRUE_FALSE:
        raise ValueError(TRUE_FALSE)
    if key == "cost_usd":
        # Text is ASCII digits with an optional fraction: Decimal alone also reads
        # "5_0", " 5 ", "+5" and other scripts' digits, which would be stored as sent.
        if isinstance(value, str) and not _USD_TEXT.fullmatch(value):
            raise ValueError("must be an amount in USD, e.g. 0.05")
        try:
            amount = Decimal(str(value))
        except InvalidOperation:
            raise ValueError("must be an amount in USD, e.g. 0.05") from None
        if not amount.is_finite():
            raise ValueError("must be a finite amount in USD")
        if amount.as_tuple().exponent < -COST_PLACES:  # type: ignore[operator]
            raise ValueError(f"must have at most {COST_PLACES} decimal places")
    elif number_problem(value, integer=True) is None:
        amount = Decimal(value)
    else:
        raise ValueError(NOT_WHOLE)
    if amount < 0:
        raise ValueError("must not be negative")
    if amount > MAX_AMOUNTS[key]:
        raise ValueError(f"must be at most {MAX_AMOUNTS[key]}")
    return amount


def amount_from_text(key: str, text: str):
    """The amount for the limit ``key`` that ``text`` typed on a text face (a CLI flag,
    a console form field) stands for, as ``parse_amount`` takes it: blank text is 0, a
    count's text the number it spells (``"5"`` -> ``5``, ``"1.5"`` -> ``1.5``, refused
    there as not whole), a USD amount's text as typed (a decimal string). Never
    raises: what is no number stays text, for ``parse_amount`` to refuse."""
    if not text.strip():
        return 0
    return text.strip() if key == "cost_usd" else number_from_text(text)


def limit_errors(budget) -> dict[str, str]:
    """Field errors of a run's limits (``Run.budget``), empty when valid: ``None`` (no
    limits) or a dict with any of the keys of ``LIMIT_FIELDS``, each value as
    ``parse_amount`` accepts it or ``None`` (no such limit, ``set_limits``). Keys of the
    result are ``budget`` or ``budget.<key>``."""
    if budget is None:
        return {}
    if not isinstance(budget, dict):
        return {"budget": "must be a JSON object"}
    errors = {}
    for key, value in budget.items():
        field = f"budget.{key}"
        if key not in LIMIT_FIELDS:
            errors[field] = f"unknown limit; use {', '.join(LIMIT_FIELDS)}"
            continue
        if value is None:
            continue
        try:
            parse_amount(key, value)
        except ValueError as exc:
            errors[field] = str(exc)
    return errors


def set_limits(budget: dict | None) -> dict:
    """The limits a valid ``budget`` (``limit_errors`` found none) sets, as stored on
    the run: a limit given as ``None`` is no limit, on every face."""
    return {key: value for key, value in (budget or {}).items() if value is not None}


def parse_additions(**amounts) -> dict[str, Decimal]:
    """``{"model_calls": Decimal, ...}`` from ``add_<key>=value`` keyword arguments (keys
    of ``LIMIT_FIELDS``, values as ``parse_amount`` accepts them; ``None`` is 0), at
    least one of them positive.

    Raises ``ControlError("invalid_budget")`` whose ``errors`` name each bad
    ``add_<key>``."""
    added, errors = {}, {}
    for name, value in amounts.items():
        key = name.removeprefix("add_")
        if key not in LIMIT_FIELDS:
            raise TypeError(f"unknown budget addition {name!r}")
        try:
            added[key] = parse_amount(key, 0 if value is None else value)
        except ValueError as exc:
            errors[name] = str(exc)
    if errors:
        raise ControlError(
            "invalid_budget",
            "; ".join(f"{name} {why}" for name, why in errors.items()),
            errors,
        )
    if not any(added.values()):
        raise ControlError(
            "invalid_budget",
            "add a positive amount of model calls, tool calls, tokens or cost",
            {name: "at least one amount must be > 0" for name in amounts},
        )
    return added


class BudgetExhausted(StepError):
    """The next call would exceed a budget; ``limit`` names the exhausted limit and
    ``budget_of`` the ancestor run whose budget it is (``None``: the run's own)."""

    def __init__(self, limit: str, detail: str, budget_of=None):
        super().__init__("BUDGET_EXHAUSTED", detail)
        self.limit = limit
        self.budget_of = budget_of


def charge(
    run_id,
    budget: dict,
    *,
    parent_run_id=None,
    model_calls: int = 0,
    tool_calls: int = 0,
    cost_usd: Decimal | str = "0",
    check_usage: bool = False,
) -> None:
    """Add the usage to the run, and to each of its ancestors from ``parent_run_id`` up
    (the run's ``parent_run_id``; ``None``: it has none), one conditional UPDATE each,
    in one transaction.

    ``budget`` is the run's limits dict (``Run.budget``); a missing key means no limit.
    An ancestor's own ``budget`` limits the family's usage. ``check_usage`` (before a
    model request, whose tokens and cost are known only after it): also refuse when the
    ``tokens`` or ``cost_usd`` used so far already reached their limit. Raises
    ``BudgetExhausted`` (and charges no one) when a limit of the run or of an ancestor
    would be passed.
    """
    charge_one = partial(
        _charge_one,
        model_calls=model_calls,
        tool_calls=tool_calls,
        cost_usd=cost_usd,
        check_usage=check_usage,
    )
    if parent_run_id is None:
        # No savepoint on the common path: one statement either charges or not.
        charge_one(run_id, budget)
        return
    with transaction.atomic():
        charge_one(run_id, budget)
        for ancestor, limits in _ancestors(parent_run_id):
            charge_one(ancestor, limits, budget_of=ancestor)


def _ancestors(parent_run_id):
    """``(run id, budget)`` of the parent ``parent_run_id`` and its ancestors, nearest
    first; one query per generation."""
    seen = set()
    while parent_run_id is not None and parent_run_id not in seen:
        seen.add(parent_run_id)
        row = Run.objects.filter(pk=parent_run_id).values_list("budget", "parent_run_id").first()
        if row is None:
            return
        yield parent_run_id, row[0] or {}
        parent_run_id = row[1]


def _charge_one(
    run_id,
    budget: dict,
    *,
    model_calls: int,
    tool_calls: int,
    cost_usd: Decimal | str,
    check_usage: bool,
    budget_of=None,
) -> None:
    """``charge`` of one run against ``budget``; ``budget_of``: the ancestor it is, for
    the refusal's detail."""
    whose = "" if budget_of is None else f"parent run {budget_of}: "
    cost = Decimal(str(cost_usd))
    condition = Q(pk=run_id)
    if check_usage:
        for key in ("tokens", "cost_usd"):
            limit = budget.get(key)
            if limit is not None:
                condition &= Q(**{f"{LIMIT_FIELDS[key]}__lt": Decimal(str(limit))})
    for key, amount in (
        ("model_calls", model_calls),
        ("tool_calls", tool_calls),
        ("cost_usd", cost),
    ):
        limit = budget.get(key)
        if limit is not None and amount:
            condition &= Q(**{f"{LIMIT_FIELDS[key]}__lte": Decimal(str(limit)) - amount})
    updated = Run.objects.filter(condition).update(
        model_calls=F("model_calls") + model_calls,
        tool_calls=F("tool_calls") + tool_calls,
        cost_usd=F("cost_usd") + cost,
    )
    if updated != 1:
        run = Run.objects.only("model_calls", "tool_calls", "cost_usd").get(pk=run_id)
        for key, amount in (
            ("model_calls", model_calls),
            ("tool_calls", tool_calls),
            ("cost_usd", cost),
        ):
            limit = budget.get(key)
            if limit is not None and amount and getattr(run, key) + amount > Decimal(str(limit)):
                raise BudgetExhausted(
                    key, f"{whose}{key} limit {limit} reached (used {getattr(run, key)})", budget_of
                )
        if check_usage:
            run = Run.objects.only("tokens", "cost_usd").get(pk=run_id)
            for key in ("tokens", "cost_usd"):
                limit = budget.get(key)
                if limit is not None and getattr(run, key) >= Decimal(str(limit)):
                    raise BudgetExhausted(
                        key,
                        f"{whose}{key} limit {limit} reached (used {getattr(run, key)})",
                        budget_of,
                    )
        raise BudgetExhausted("unknown", f"{whose}budget charge refused", budget_of)


def add_usage(run_id, *, tokens: int, cost_usd: Decimal | None, parent_run_id=None) -> None:
    """Add what a model response used, after the fact (it cannot be refused any more),
    to the run and its ancestors from ``parent_run_id`` up, in one UPDATE: ``tokens``
    (input + output) and ``cost_usd`` (``None``: no price is known, the call counts as
    unpriced and the run's cost shows as unknown)."""
    updates = {"tokens": F("tokens") + int(tokens)}
    if cost_usd is None:
        updates["unpriced_model_calls"] = F("unpriced_model_calls") + 1
    elif cost_usd:
        updates["cost_usd"] = F("cost_usd") + cost_usd
    family = [run_id, *(pk for pk, _ in _ancestors(parent_run_id))]
    Run.objects.filter(pk__in=family).update(**updates)


def usage(run: Run) -> dict:
    """``{"model_calls": int, "tool_calls": int, "tokens": int, "cost_usd": str,
    "unpriced_model_calls": int}`` used so far, as checkpoints keep it; ``cost_usd`` is
    the priced part (see ``shown_usage`` for what people see)."""
    return run.usage()


def shown_usage(run: Run) -> dict:
    """``usage`` as shown to people and clients: ``cost_usd`` is ``None`` (unknown, never
    0) while a model call had no price, and ``cost_usd_priced`` the part known."""
    used = usage(run)
    return {
        **used,
        "cost_usd": None if run.unpriced_model_calls else used["cost_usd"],
        "cost_usd_priced": used["cost_usd"],
    }


def pause_exhausted(run: Run, step, attempt: int, actor: str, exc: BudgetExhausted) -> bool:
    """The step's next call would pass the budget (and was not made): put the step back
    to PENDING and pause the run with a ``budget_exhausted`` takeover, fenced by the
    attempt. Returns ``False`` (recording ``step.commit_rejected``) when the attempt no
    longer holds the step or the run is terminal; a cancel-requested run is not paused.
    """
    given_back = Due(
        step,
        actor,
        "step.budget_exhausted",
        {"attempt": attempt, "limit": exc.limit, "detail": exc.detail},
        attempt=attempt,
        # Held for the takeover: raising the budget makes it due and notifies.
        notify=False,
        rejected={"error_code": exc.code},
        fields={"error_code": exc.code, "error_detail": exc.detail},
    )
    with run_transaction(run.pk) as tx:
        if not store().schedule(tx, given_back):
            return False
        if tx.run.status == RunStatus.CANCEL_REQUESTED:
            return True
        current = Run.objects.get(pk=run.pk)
        open_takeover(
            tx,
            cause="budget_exhausted",
            reason=f"budget exhausted: {exc.detail}",
            actor=actor,
            step=step,
            suggested_action=_raise_suggestion(run.pk, exc),
            evidence={
                "limit": exc.limit,
                "limits": current.budget,
                "used": shown_usage(current),
                **({} if exc.budget_of is None else {"budget_of": str(exc.budget_of)}),
            },
        )
    return True


def raise_budget(
    run: Run,
    *,
    actor: str,
    add_model_calls: int = 0,
    add_tool_calls: int = 0,
    add_cost_usd: Decimal | str = "0",
    add_tokens: int = 0,
    reason: str = "",
) -> Run:
    """Raise the run's limits by the given amounts (counts, USD) and, if the run is
    PAUSED for ``budget_exhausted``, resolve that takeover and resume the step that ran
    out: a PENDING one is dispatched again, a FAILED one gets a new row (as a retry), so
    the RUNNING run always has a due step. Records ``budget.raised`` with the actor.
    Then every descendant run paused because one of the raised limits of this run ran
    out resumes the same way, each in its own transaction.

    Amounts are checked by ``parse_additions`` (whole counts, USD, 0 to
    ``MAX_AMOUNTS``). Raises ``ControlError``: ``invalid_budget`` (an amount not a
    number, negative, over its maximum, all zero, or a resulting limit over
    ``MAX_AMOUNTS``), ``limit_not_set`` (adding to a limit the run does not have: it is
    unlimited there already; nothing changes), ``run_terminal``, ``reason_required`` (a
    blank ``reason``), ``nothing_to_resume`` (paused for the budget with no step to go
    on with; nothing changes).
    """
    added = parse_additions(
        add_model_calls=add_model_calls,
        add_tool_calls=add_tool_calls,
        add_tokens=add_tokens,
        add_cost_usd=add_cost_usd,
    )
    require_reason(reason, "budget")
    with run_transaction(run.pk) as tx:
        if tx.run.status in RUN_TERMINAL:
            raise ControlError("run_terminal", f"run is {tx.run.status}; its budget is final")
        before = dict(tx.run.budget or {})
        limits = dict(before)
        unset, over = {}, {}
        for key, amount in added.items():
            if not amount:
                continue
            if key not in limits:
                unset[f"add_{key}"] = "the run has no such limit: it is unlimited there already"
                continue
            total = Decimal(str(limits[key])) + amount
            if total > MAX_AMOUNTS[key]:
                over[f"add_{key}"] = f"would make the limit {total}, over {MAX_AMOUNTS[key]}"
            limits[key] = str(total) if key == "cost_usd" else int(total)
        if unset:
            raise ControlError(
                "limit_not_set",
                f"no such limit to raise ({', '.join(unset)}); the run's limits: {before}",
                unset,
            )
        if over:
            raise ControlError("invalid_budget", "; ".join(over.values()), over)
        Run.objects.filter(pk=run.pk).update(budget=limits)
        tx.event(
            "budget.raised",
            {
                "reason": reason or "budget raised",
                "before": before,
                "after": limits,
                "added": {k: str(v) for k, v in added.items() if v},
            },
            actor=actor,
        )
        takeover = (
            store().resolve(
                tx,
                Resolution(
                    actor,
                    {"action": "resume", "reason": reason or "budget raised"},
                    match={"cause": "budget_exhausted"},
                ),
            )
            if tx.run.status == RunStatus.PAUSED
            else None
        )
        if takeover is not None:
            step = _exhausted_step(tx.run, takeover.step_id)
            if step is None:
                # Rolls the whole raise back: a RUNNING run needs a step to run.
                raise ControlError(
                    "nothing_to_resume",
                    "the run has no step that ran out of budget to go on with; "
                    "resume it from a checkpoint instead",
                )
            _go_on(tx, step, actor, reason)
    _resume_descendants(run.pk, {key for key, amount in added.items() if amount}, actor, reason)
    run.refresh_from_db()
    return run


#: The ``runs budget`` flag that raises each ``Run.budget`` key.
_RAISE_FLAGS = {
    "model_calls": "--add-model-calls N",
    "tool_calls": "--add-tool-calls N",
    "tokens": "--add-tokens N",
    "cost_usd": "--add-cost-usd USD",
}


def _raise_suggestion(run_id, exc: BudgetExhausted) -> str:
    """What a ``budget_exhausted`` takeover tells the operator: the ``runs budget``
    command that raises the limit that ran out (every limit when it is not known), on
    the run whose budget it is."""
    flags = _RAISE_FLAGS.get(exc.limit) or " ".join(_RAISE_FLAGS.values())
    if exc.budget_of is None:
        return f"Raise the budget: runs budget {run_id} {flags} (the run then resumes)."
    return (
        f"Raise the family's budget: runs budget {exc.budget_of} {flags} (this run then resumes)."
    )


def _go_on(tx, step: Step, actor: str, reason: str) -> None:
    """Inside ``tx`` (the run's transaction, its ``budget_exhausted`` takeover just
    resolved): make the run RUNNING and ``step``, the one that ran out, due again: a
    PENDING one dispatched as it is, a FAILED one as a new row (as a retry makes)."""
    tx.transition_run(RunStatus.RUNNING, actor=actor, reason="budget raised")
    if step.status == StepStatus.PENDING:
        # Due now, with a fresh retry allowance.
        store().schedule(tx, Due(step, actor, fields={"attempt_base": step.attempt}))
    else:
        tx.event(
            "step.retry_requested",
            {"step": step.name, "reason": reason, "failed_step_id": step.pk},
            step_id=step.pk,
            actor=actor,
        )
        tx.schedule_step(step.name, actor=actor)


def _resume_descendants(run_id, raised: set[str], actor: str, reason: str) -> None:
    """After ``run_id``'s limits ``raised`` went up: resume each descendant run PAUSED
    because one of those limits of ``run_id``'s ran out (its open ``budget_exhausted``
    takeover names ``run_id`` as ``budget_of``), each in its own transaction. A
    descendant whose state moved meanwhile is left as it is; one whose next call is
    still over the family's budget pauses again when it asks."""
    waiting = Takeover.objects.filter(
        status=Takeover.Status.OPEN,
        cause="budget_exhausted",
        evidence__budget_of=str(run_id),
    ).values_list("pk", "run_id", "step_id", "evidence")
    for takeover_id, child_id, step_id, evidence in waiting:
        if evidence.get("limit") not in raised:
            continue
        with run_transaction(child_id) as tx:
            step = _exhausted_step(tx.run, step_id)
            if tx.run.status != RunStatus.PAUSED or step is None:
                continue
            note = {"action": "resume", "reason": reason or "the family's budget raised"}
            if store().resolve(tx, Resolution(actor, note, match={"pk": takeover_id})):
                _go_on(tx, step, actor, reason)


def _exhausted_step(run: Run, step_id: int | None):
    """The step a ``budget_exhausted`` takeover waits on, in the run's generation: the
    takeover's own step if it is PENDING (the call was refused before it was made) or
    FAILED, else the run's latest PENDING or FAILED step; ``None`` when there is none."""
    open_steps = Step.objects.filter(
        run_id=run.pk,
        generation=run.generation,
        status__in=[StepStatus.PENDING, StepStatus.FAILED],
    )
    own = open_steps.filter(pk=step_id).first() if step_id is not None else None
    return own or open_steps.order_by("-seq").first()
