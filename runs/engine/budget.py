"""Run budgets: each model or tool call is charged to the run as it happens, with a
conditional UPDATE that refuses a charge that would pass the limit."""

from decimal import Decimal

from django.db.models import F, Q

from runs.engine.errors import StepError
from runs.models import Run

#: ``Run.budget`` keys and the usage column each limits.
LIMIT_FIELDS = {"model_calls": "model_calls", "tool_calls": "tool_calls", "cost_usd": "cost_usd"}


class BudgetExhausted(StepError):
    """The next call would exceed the run's budget; ``limit`` names the exhausted limit."""

    def __init__(self, limit: str, detail: str):
        super().__init__("BUDGET_EXHAUSTED", detail)
        self.limit = limit


def charge(run_id, budget: dict, *, model_calls: int = 0, tool_calls: int = 0,
           cost_usd: Decimal | str = "0") -> None:
    """Add the usage to the run in one conditional UPDATE.

    ``budget`` is the run's limits dict (``Run.budget``); a missing key means no limit.
    Raises ``BudgetExhausted`` (and charges nothing) when a limit would be passed.
    """
    cost = Decimal(str(cost_usd))
    condition = Q(pk=run_id)
    for key, amount in (("model_calls", model_calls), ("tool_calls", tool_calls), ("cost_usd", cost)):
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
        for key, amount in (("model_calls", model_calls), ("tool_calls", tool_calls), ("cost_usd", cost)):
            limit = budget.get(key)
            if limit is not None and amount and getattr(run, key) + amount > Decimal(str(limit)):
                raise BudgetExhausted(key, f"{key} limit {limit} reached (used {getattr(run, key)})")
        raise BudgetExhausted("unknown", "budget charge refused")


def usage(run: Run) -> dict:
    """``{"model_calls": int, "tool_calls": int, "cost_usd": str}`` used so far."""
    return {"model_calls": run.model_calls, "tool_calls": run.tool_calls,
            "cost_usd": str(run.cost_usd)}
