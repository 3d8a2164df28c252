"""The example of a tool whose result an outside system delivers later: ``start_export``
hands the export to a (pretend) export service and defers the call (``CallDeferred``);
the run waits in WAITING_EXTERNAL until ``runs deliver`` (or the API, or the console's
signal form) brings the result, then the agent answers with it. Offline
(``AGENTOPS_MODEL=sim``) the model is a scripted ``FunctionModel``.

    runs start export_agent --input '{"prompt": "Export the Q3 report"}'
"""

from pydantic_ai import Agent, CallDeferred, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentops.authoring import register_agent

agent = Agent(name="export", output_type=[str, DeferredToolRequests])


@agent.tool_plain
def start_export(report: str) -> str:
    """Ask the export service for ``report``; its result comes later."""
    raise CallDeferred(metadata={"service": "exports", "report": report})


def _offline(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Start the export (call id ``export-1``), then report what came back."""
    returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    if not returned:
        return ModelResponse(
            parts=[ToolCallPart("start_export", {"report": "Q3"}, tool_call_id="export-1")]
        )
    return ModelResponse(parts=[TextPart(f"The export is ready: {returned[-1].content}")])


workflow = register_agent(
    agent,
    name="export_agent",
    version=1,
    description="Start an export and wait for the export service's result (CallDeferred).",
    tools={"start_export": "unsafe"},
    offline_model=FunctionModel(_offline),
    deferred_timeout=24 * 3600,
)
