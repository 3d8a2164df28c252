"""The shipped example agent: a Pydantic AI agent registered as a durable workflow.

``lookup_order`` is a read tool; ``issue_refund`` is unsafe (the refund desk applies
every request), requires approval (a deferred tool: the run waits for an approver),
and has a verify hook that asks the shop's refund ledger whether an interrupted refund
happened. Offline (``AGENTOPS_MODEL=sim``, the default) the model is a scripted
``FunctionModel``; with ``AGENTOPS_MODEL=openai:MODEL OPENAI_BASE_URL=...`` it is any
OpenAI-compatible server.

    runs start support_agent --input '{"prompt": "Order A1001 arrived broken, refund it"}'
"""

import re
from typing import Annotated, Any

from pydantic import Field
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentops.authoring import AgentTool, ToolCall, VerifyAnswer, current_call, register_agent
from lab.sim import shop

INSTRUCTIONS = (
    "You are a support agent for a small shop. Look the order up before acting. "
    "Refund damaged orders for their full amount with issue_refund; then tell the "
    "customer what you did in one sentence."
)

agent = Agent(instructions=INSTRUCTIONS, output_type=[str, DeferredToolRequests], name="support")


@agent.tool_plain
def lookup_order(order_id: str) -> dict:
    """Look up an order by its id (e.g. A1001): item, amount in USD, status, refunded."""
    call = current_call()
    return shop.lookup_order(order_id, run_id=call.run_id if call else "")


@agent.tool_plain(requires_approval=True)
def issue_refund(order_id: str, amount: Annotated[float, Field(gt=0)]) -> dict:
    """Refund ``amount`` USD (more than 0) of order ``order_id`` to the customer."""
    call = current_call()
    return shop.issue_refund(
        order_id,
        f"{amount:.2f}",
        run_id=call.run_id if call else "",
        key=call.idempotency_key if call else "",
    )


def verify_refund(arguments: dict, call: ToolCall) -> VerifyAnswer:
    """Did an interrupted refund of this order by this run reach the shop?"""
    found = [r for r in shop.refunds_for(arguments["order_id"]) if r["run_id"] == call.run_id]
    if found:
        refund = found[-1]
        return VerifyAnswer(
            "done",
            result={k: refund[k] for k in ("refund_id", "order_id", "amount")},
            evidence=f"the shop's ledger has refund {refund['refund_id']} for this run",
        )
    return VerifyAnswer("not_done", evidence="no refund for this order by this run")


def next_action(prompt: str, results: list[tuple[str, Any]]) -> dict[str, Any]:
    """The scripted support agent's next move from the customer's ``prompt`` and the
    tool results so far (``[(tool name, result)]``): ``{"call": name, "arguments"}`` or
    ``{"text": reply}``. Shared by the offline model and the tests' model server."""
    if not results:
        found = re.search(r"\b([A-Z]\d{3,})\b", prompt)
        if not found:
            return {"text": "Which order is it? Please give me the order id."}
        return {"call": "lookup_order", "arguments": {"order_id": found.group(1)}}
    name, result = results[-1]
    if name == "lookup_order":
        if not isinstance(result, dict) or "error" in result:
            return {"text": "I could not find that order."}
        if "damaged" not in result.get("status", "") or float(result.get("refunded", 0)):
            return {"text": f"Order {result['order_id']} needs no refund."}
        return {
            "call": "issue_refund",
            "arguments": {"order_id": result["order_id"], "amount": float(result["amount"])},
        }
    if name == "issue_refund" and isinstance(result, dict) and "refund_id" in result:
        return {
            "text": f"I refunded {result['amount']} USD for order {result['order_id']} "
            f"(refund {result['refund_id']})."
        }
    return {"text": f"I did not issue the refund: {result}"}


def _offline(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The offline model: ``next_action`` over the conversation so far."""
    from agentops.authoring import prompt_and_results

    prompt, results = prompt_and_results(messages)
    action = next_action(prompt, results)
    if "call" in action:
        return ModelResponse(parts=[ToolCallPart(action["call"], action["arguments"])])
    return ModelResponse(parts=[TextPart(action["text"])])


workflow = register_agent(
    agent,
    name="support_agent",
    version=1,
    description="Look up an order and refund it after a human approves (a Pydantic AI agent).",
    tools={
        "lookup_order": "read",
        "issue_refund": AgentTool(side_effect="unsafe", verify=verify_refund),
    },
    offline_model=FunctionModel(_offline),
)
