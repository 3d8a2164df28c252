"""Decisions on an agent's tool call (an approval whose evidence has ``kind:
"tool_call"``): besides approve and reject, approve with edited arguments (validated
against the tool's own schema before anything changes) or reject with a message the
model receives instead of the tool result."""

from typing import Any

from runs.engine.control.lifecycle import ControlError
from runs.workflows import registry


def decision_terms(
    approval, decision: str, arguments: Any = None, message: str = ""
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(output, event)`` additions for deciding ``approval``: the output the agent
    step reads (``tool_call_id``, edited ``arguments``, ``message``) and what the event
    records (``edited: {tool, from, to}``, ``message``).

    Raises ``ControlError``: ``invalid_decision`` (edits or a message on an approval
    that is not a tool call, edited arguments with a rejection, a message with an
    approval) or ``invalid_arguments`` with field errors (``{"arguments.amount": ...}``).
    """
    evidence = approval.evidence if isinstance(approval.evidence, dict) else {}
    if evidence.get("kind") != "tool_call":
        given = {"arguments": arguments is not None, "message": bool(message)}
        if any(given.values()):
            raise ControlError(
                "invalid_decision",
                "only an agent's tool-call approval takes edited arguments or a message",
                {field: "not a tool-call approval" for field, sent in given.items() if sent},
            )
        return {}, {}
    output: dict[str, Any] = {"tool_call_id": evidence.get("tool_call_id")}
    event: dict[str, Any] = {"tool": evidence.get("tool")}
    if arguments is not None:
        if decision != "approve":
            raise ControlError(
                "invalid_decision",
                "edited arguments go with approve",
                {"arguments": "only with approve"},
            )
        errors = _validate(approval, evidence.get("tool", ""), arguments)
        if errors:
            raise ControlError(
                "invalid_arguments",
                f"the edited arguments do not fit {evidence.get('tool')}: "
                + "; ".join(f"{k}: {v}" for k, v in errors.items()),
                errors,
            )
        if arguments != evidence.get("arguments"):
            output["arguments"] = arguments
            event["edited"] = {
                "tool": evidence.get("tool"),
                "from": evidence.get("arguments"),
                "to": arguments,
            }
    if message:
        if decision != "reject":
            raise ControlError(
                "invalid_decision",
                "a message for the model goes with reject (the tool does not run)",
                {"message": "only with reject"},
            )
        output["message"] = message
        event["message"] = message
    return output, event


def _validate(approval, tool: str, arguments: Any) -> dict[str, str]:
    run = approval.run
    try:
        workflow = registry.get(run.workflow, run.workflow_version)
    except registry.UnknownWorkflow:
        return {"arguments": f"{run.workflow}@{run.workflow_version} is unknown to this code"}
    validate = getattr(workflow, "validate_tool_arguments", None)
    if validate is None:
        return {"arguments": f"{run.workflow} cannot validate edited arguments"}
    return validate(tool, arguments)
