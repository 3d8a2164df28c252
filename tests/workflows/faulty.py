"""``faulty``: a two-step workflow whose first step misbehaves as ``input["case"]`` says
(a value no database stores faithfully, an error with NUL, a Retry-After, a slow step,
an unsafe call that fails after it took effect); ``after`` shows what the next step
sees. Registered by tests through ``AGENTOPS_EXTRA_WORKFLOW_MODULES`` or ``register``."""

import threading
import time
from datetime import UTC, datetime
from types import SimpleNamespace

from agentops.authoring import StepError, Tool, VerifyAnswer, Workflow, register

#: The simulated outside system of ``post_once``: idempotency key -> times applied.
APPLIED: dict[str, int] = {}


def _post(arguments: dict, call) -> dict:
    APPLIED[call.idempotency_key] = APPLIED.get(call.idempotency_key, 0) + 1
    raise RuntimeError("HTTP 500 Internal Server Error (after applying the post)")


def _verify(arguments: dict, call) -> VerifyAnswer:
    if APPLIED.get(call.idempotency_key):
        return VerifyAnswer("done", {"posted": True}, evidence="the post is there")
    return VerifyAnswer("not_done", evidence="no such post")


post_once = Tool("test.post_once", _post, side_effect="unsafe", verify=_verify)


def _post_ok(arguments: dict, call) -> dict:
    APPLIED[call.idempotency_key] = APPLIED.get(call.idempotency_key, 0) + 1
    return {"posted": True}


post_ok = Tool("test.post_ok", _post_ok, side_effect="unsafe", verify=_verify)


#: Released by the test that uses ``post_slow_verify`` (its verify waits for it).
VERIFY_RELEASE = threading.Event()


def _verify_hanging(arguments: dict, call) -> VerifyAnswer:
    VERIFY_RELEASE.wait(60)
    return VerifyAnswer("not_done", evidence="answered too late")


#: Set when the ``hold_then_post`` case's hold ends (run out, or stopped at a safe point).
HOLD_ENDED = threading.Event()

post_slow_verify = Tool(
    "test.post_slow_verify", _post, side_effect="unsafe", verify=_verify_hanging, timeout=1
)


def _read_at(arguments: dict, call) -> dict:
    return {"at": datetime(2026, 1, 1, tzinfo=UTC)}


read_at = Tool("test.read_at", _read_at, side_effect="read")


def _echo(arguments: dict, call) -> dict:
    return arguments


echo = Tool("test.echo", _echo, side_effect="read")

CASES = {
    # Durations and instants no timer holds: each is a step error, never a crash.
    "sleep_huge": lambda ctx: ctx.sleep(99999999999999999999999) or {"fine": True},
    "sleep_past_bound": lambda ctx: ctx.sleep(315_360_001) or {"fine": True},
    "sleep_nan": lambda ctx: ctx.sleep(float("nan")) or {"fine": True},
    "sleep_text": lambda ctx: ctx.sleep("60") or {"fine": True},
    "sleep_until_far": lambda ctx: (
        ctx.sleep_until(datetime(9999, 12, 31, tzinfo=UTC)) or {"fine": True}
    ),
    "nan": lambda ctx: {"score": float("nan")},
    "datetime": lambda ctx: {"at": datetime(2026, 1, 1, tzinfo=UTC)},
    "int_key": lambda ctx: {"by_id": {1: "a"}},
    "nul_text": lambda ctx: {"text": "bad\x00byte"},
    "ok": lambda ctx: {"fine": True},
    # Text a terminal would act on (a colour escape, a bidi override), and long.
    "terminal_text": lambda ctx: {"text": "\x1b[31mred\u202e" + "y" * 300},
    "tool_arguments": lambda ctx: ctx.call_tool(echo, {"score": float("nan")}),
    "tool_result": lambda ctx: ctx.call_tool(read_at, {}),
    "message_content": lambda ctx: ctx.add_message("assistant", b"raw") and {"fine": True},
    "message_tool_calls": lambda ctx: (
        ctx.add_message("assistant", "", tool_calls=[{"id": "c1", "args": {1: "a"}}])
        and {"fine": True}
    ),
    "message_nul": lambda ctx: ctx.add_message("assistant", "bad\x00byte") and {"fine": True},
    # A summary range no integer column holds: the database refuses it inside the commit.
    "summary_overflow": lambda ctx: (
        ctx.add_summary(SimpleNamespace(last_seq=2**70, covered_tokens=0), "too far")
        or {"fine": True}
    ),
}

workflow = Workflow("faulty", version=1, input_fields={"case": str})


@workflow.step()
def produce(ctx):
    case = ctx.input["case"]
    if case == "nul_error":
        raise StepError("DEPENDENCY_UNAVAILABLE", "bad\x00byte")
    if case == "hostile_error":
        # A bug's message carrying text a terminal acts on (a tool's error, say).
        raise RuntimeError(ctx.input["text"])
    if case == "long_code":
        raise StepError("E" * 100, "a code longer than its column")
    if case == "odd_error":
        raise StepError(429, {"detail": "not text"})
    if case == "retry_after":
        raise StepError("RATE_LIMITED", "429 Too Many Requests", retry_after="120")
    if case == "sleep":
        time.sleep(float(ctx.input.get("seconds", "3")))
        return {"slept": True}
    if case == "post":
        return ctx.call_tool(post_once, {"text": "hello"})
    if case == "post_hanging_verify":
        return ctx.call_tool(post_slow_verify, {"text": "hello"})
    if case == "hold_then_post":
        # Long work with safe points, then a side effect.
        until = time.monotonic() + float(ctx.input.get("seconds", "3"))
        try:
            while time.monotonic() < until:
                ctx.safe_point()
                time.sleep(0.05)
        finally:
            HOLD_ENDED.set()
        return ctx.call_tool(post_ok, {"text": "hello"})
    return CASES[case](ctx)


@workflow.step()
def after(ctx):
    return {"seen": ctx.outputs["produce"]}


register(workflow)
