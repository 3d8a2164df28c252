"""Workflows under limits, for ``tests/test_limits.py``. Registered by tests through
``AGENTOPS_EXTRA_WORKFLOW_MODULES``.

- ``per_customer``: at most one run per ``input["customer"]`` in flight; its one step
  waits until the file ``input["gate"]`` exists (when given; the simulated outside
  work), then takes ``input["seconds"]`` (default 0).
- ``per_customer_step``: two steps; ``prepare`` runs freely, ``charge`` is keyed by
  ``input["customer"]`` with limit 1 and waits for ``input["gate"]`` as ``work`` does.
- ``asks_model``: one step that asks the model ``input["model"]`` once.
- ``keyed_chat``: a message workflow keyed by ``input["customer"]``, which a message
  posted to a thread does not give.
- ``limited_step``: one step declared ``rate_limit="steps"``; its output is the
  ``time.monotonic()`` at which its code ran.
- ``family_budget``: starts ``input["children"]`` child runs of ``asks_model`` with its
  ``input["model"]`` and waits for them (a parent whose budget covers its children).
"""

import os
import time

from agentops.authoring import Workflow, register


def _gated(ctx) -> None:
    gate = ctx.input.get("gate")
    deadline = time.monotonic() + 120
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        ctx.safe_point()
        time.sleep(0.05)
    time.sleep(float(ctx.input.get("seconds", 0)))


per_customer = Workflow(
    "per_customer",
    version=1,
    input_fields={"customer": str},
    concurrency_key="customer",
    concurrency_limit=1,
    internal=True,
)


@per_customer.step()
def work(ctx):
    _gated(ctx)
    return {"customer": ctx.input["customer"]}


per_customer_step = Workflow(
    "per_customer_step", version=1, input_fields={"customer": str}, internal=True
)


@per_customer_step.step()
def prepare(ctx):
    return {"prepared": ctx.input["customer"]}


@per_customer_step.step(concurrency_key="customer", concurrency_limit=1)
def charge(ctx):
    _gated(ctx)
    return {"charged": ctx.input["customer"]}


asks_model = Workflow("asks_model", version=1, input_fields={"model": str}, internal=True)


@asks_model.step()
def ask(ctx):
    reply = ctx.call_model([{"role": "user", "content": "Hi"}], model=ctx.input["model"])
    return {"answer": reply.content}


limited_step = Workflow("limited_step", version=1, internal=True)


@limited_step.step(rate_limit="steps")
def limited(ctx):
    return {"at": time.monotonic()}


keyed_chat = Workflow(
    "keyed_chat",
    version=1,
    input_fields={"text": str},
    message_field="text",
    concurrency_key="customer",
    internal=True,
)


@keyed_chat.step()
def answer(ctx):
    return {"text": ctx.input["text"]}


family_budget = Workflow(
    "family_budget", version=1, input_fields={"model": str, "children": int}, internal=True
)


@family_budget.child("asks_model", many=True)
def ask_children(ctx):
    return [{"model": ctx.input["model"]} for _ in range(ctx.input["children"])]


register(per_customer)
register(per_customer_step)
register(keyed_chat)
register(asks_model)
register(limited_step)
register(family_budget)
