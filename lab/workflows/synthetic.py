"""Synthetic workflows for the benchmark, the drills and the soak.

- ``bench_noop``: ``BENCH_STEPS`` no-op steps (engine overhead only).
- ``bench_wait``: ``WAIT_STEPS`` steps that each wait (a time, or until a file exists),
  as agent steps wait on a model (execution slots).
- ``bench_agent``: ``WAIT_STEPS`` steps that each ask the model once (``AGENTOPS_MODEL``).
- ``bench_hold``: one step that blocks on its first attempt until its worker is killed,
  and returns at once on a later attempt (recovery time after SIGKILL).
- ``synthetic_order``: plan (model call) -> reserve (idempotent, compensable) -> charge
  (idempotent) -> notify (unsafe, with a verify hook) -> done, against the simulated
  systems of ``lab.sim.services``, which keep their own ledgers.
"""

import os
import time

from agentops.authoring import RetryPolicy, Tool, VerifyAnswer, Workflow, register
from lab.sim import model as sim_model
from lab.sim import services

#: Steps per ``bench_noop`` run.
BENCH_STEPS = 10

bench_noop = Workflow(
    "bench_noop", version=1, description="No-op steps for the benchmark.", internal=True
)


def _noop(ctx):
    return None


for _i in range(1, BENCH_STEPS + 1):
    bench_noop.step(name=f"s{_i:02d}")(_noop)

bench_hold = Workflow(
    "bench_hold",
    version=1,
    description="Blocks on attempt 1 until killed (recovery benchmark).",
    internal=True,
)


@bench_hold.step()
def hold(ctx):
    if ctx.attempt == 1:
        deadline = time.monotonic() + 3600
        while time.monotonic() < deadline:
            ctx.safe_point()
            time.sleep(0.05)
    return {"attempt": ctx.attempt}


#: Steps per ``bench_wait`` run.
WAIT_STEPS = 3

bench_wait = Workflow(
    "bench_wait",
    version=1,
    description="Steps that wait, as agent steps wait on a model (execution slots).",
    internal=True,
)


def _wait(ctx):
    """Wait ``input["wait_s"]`` seconds, or, with ``input["gate"]`` (a file path), until
    that file exists; at a safe point every 50 ms, so a cancel or a lost lease stops it."""
    gate = ctx.input.get("gate")
    deadline = time.monotonic() + (3600 if gate else float(ctx.input.get("wait_s", 1)))
    while (left := deadline - time.monotonic()) > 0:
        if gate and os.path.exists(gate):
            break
        ctx.safe_point()
        time.sleep(min(0.05, left))
    return {"attempt": ctx.attempt}


for _i in range(1, WAIT_STEPS + 1):
    bench_wait.step(name=f"w{_i}")(_wait)


bench_agent = Workflow(
    "bench_agent",
    version=1,
    description="Steps that each ask the model once (the agents benchmark).",
    internal=True,
)


def _ask(ctx):
    reply = ctx.call_model(
        [{"role": "user", "content": ctx.step.name, "tool_calls": [], "tool_call_id": None}]
    )
    return {"reply": reply.content[:40]}


for _i in range(1, WAIT_STEPS + 1):
    bench_agent.step(name=f"a{_i}")(_ask)


def _call(fn):
    return lambda args, call: fn(args, run_id=call.run_id, key=call.idempotency_key)


def _verify_mail(args, call):
    sent = services.mail_sent(call.idempotency_key)
    if sent is None:
        return VerifyAnswer(
            "not_done", evidence=f"mailer has no message with key {call.idempotency_key}"
        )
    return VerifyAnswer(
        "done",
        {"ref": sent["ref"], "key": sent["key"], "replayed": False},
        evidence=f"mailer sent {sent['ref']} with key {call.idempotency_key}",
    )


inventory_reserve = Tool("inventory.reserve", fn=_call(services.reserve), side_effect="idempotent")
inventory_release = Tool("inventory.release", fn=_call(services.release), side_effect="idempotent")
payments_charge = Tool("payments.charge", fn=_call(services.charge), side_effect="idempotent")
mailer_send = Tool(
    "mailer.send", fn=_call(services.send_mail), side_effect="unsafe", verify=_verify_mail
)

synthetic_order = Workflow(
    "synthetic_order",
    version=1,
    description="Reserve stock, charge, send a confirmation (simulated systems).",
    input_fields={"sku": str, "amount": int},
)


def _latency(ctx) -> int:
    return int(ctx.input.get("latency_ms", 0))


@synthetic_order.step(
    timeout=2.0, retry=RetryPolicy(max_attempts=3, initial_delay=0.5, max_delay=2.0)
)
def plan(ctx):
    reply = ctx.call_model(
        [
            {
                "role": "user",
                "content": f"order {ctx.input['sku']}",
                "tool_calls": [],
                "tool_call_id": None,
            }
        ]
    )
    return {"note": reply.content[:80], "cost": sim_model.COST_PER_CALL_USD}


def _release(ctx, output):
    return ctx.call_tool(
        inventory_release, {"sku": ctx.input["sku"], "ref": output["ref"]}, action="release"
    )


@synthetic_order.step(compensate=_release)
def reserve(ctx):
    return ctx.call_tool(
        inventory_reserve, {"sku": ctx.input["sku"], "qty": 1, "latency_ms": _latency(ctx)}
    )


@synthetic_order.step()
def charge(ctx):
    return ctx.call_tool(
        payments_charge, {"amount": ctx.input["amount"], "latency_ms": _latency(ctx)}
    )


@synthetic_order.step(compensable=False)
def notify(ctx):
    return ctx.call_tool(
        mailer_send,
        {
            "to": "customer@example.com",
            "body": f"order {ctx.input['sku']} confirmed",
            "latency_ms": _latency(ctx),
        },
    )


@synthetic_order.step()
def done(ctx):
    return {
        "reserved": ctx.outputs["reserve"]["ref"],
        "charged": ctx.outputs["charge"]["ref"],
        "mailed": ctx.outputs["notify"]["ref"],
    }


for _wf in (bench_noop, bench_hold, bench_wait, bench_agent, synthetic_order):
    register(_wf)
