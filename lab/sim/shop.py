"""A simulated shop for the ``support_agent`` example: orders to look up and a refund
desk that applies every refund it is asked for (no idempotency key, like many real
payment back offices), with a ledger of refunds to verify against."""

from decimal import Decimal, InvalidOperation
from typing import Any

from lab.sim import devices
from lab.sim.devices import DeviceStore

shop = DeviceStore(
    "shop",
    {
        "orders": {
            "A1001": {"item": "kettle", "amount": "42.00", "status": "delivered damaged"},
            "A1002": {"item": "toaster", "amount": "25.50", "status": "delivered"},
        },
        "refunds": [],
    },
)
if shop not in devices.DEVICES:
    devices.DEVICES.append(shop)


def lookup_order(order_id: str, *, run_id: str = "") -> dict[str, Any]:
    """``{"order_id", "item", "amount", "status", "refunded"}`` or ``{"error"}``."""
    with shop.locked() as data:
        shop.log_call(data, "lookup_order", run_id, args={"order_id": order_id})
        order = data["state"]["orders"].get(order_id)
        refunded = [r for r in data["state"]["refunds"] if r["order_id"] == order_id]
    if order is None:
        return {"error": f"no order {order_id}"}
    return {"order_id": order_id, **order, "refunded": sum_amounts(refunded)}


def issue_refund(order_id: str, amount: str, *, run_id: str = "", key: str = "") -> dict:
    """Apply a refund (every request is applied); returns ``{"refund_id", "order_id",
    "amount"}``. Raises ``ValueError`` for an amount that is not a positive number."""
    try:
        value = Decimal(str(amount))
    except InvalidOperation as exc:
        raise ValueError(f"amount {amount!r} is not a number") from exc
    if not value.is_finite() or value <= 0:
        raise ValueError("amount must be > 0")
    with shop.locked() as data:
        shop.log_call(data, "issue_refund", run_id, key, {"order_id": order_id, "amount": amount})
        refunds = data["state"]["refunds"]
        refund = {
            "refund_id": f"R{len(refunds) + 1}",
            "order_id": order_id,
            "amount": str(value),
            "run_id": run_id,
        }
        # A new list: the in-memory initial state must stay as it was.
        data["state"] = {**data["state"], "refunds": [*refunds, refund]}
    return {k: refund[k] for k in ("refund_id", "order_id", "amount")}


def refunds_for(order_id: str) -> list[dict]:
    """The refunds applied to ``order_id``, oldest first."""
    return [r for r in shop.snapshot()["state"]["refunds"] if r["order_id"] == order_id]


def sum_amounts(refunds: list[dict]) -> str:
    return str(sum((Decimal(r["amount"]) for r in refunds), Decimal(0)))
