"""Decisions on an agent's tool call (an approval whose evidence has ``kind:
"tool_call"``): besides approve and reject, approve with edited arguments (validated
against the tool's own schema before anything changes) or reject with a message the
model receives instead of the tool result."""

from typing import Any

from approvals.plain_text import plain_text
from runs.engine.service import ControlError
from runs.models import Approval, Event
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


def tool_facts(approval) -> dict[str, Any]:
    """What the approver needs to know of the tool an agent asks to call:
    ``{"tool", "description", "schema", "arguments"}`` (the model's arguments). The
    description and schema come from the workflow's code, else from the evidence the
    worker stored (the schema) or are empty (the description); the description is plain
    text (``plain_text``: a docstring's inline markup removed, still to be escaped)."""
    evidence = approval.evidence if isinstance(approval.evidence, dict) else {}
    tool = str(evidence.get("tool", ""))
    description, schema = "", evidence.get("schema")
    try:
        workflow = registry.get(approval.run.workflow, approval.run.workflow_version)
    except registry.UnknownWorkflow:
        workflow = None
    describe = getattr(workflow, "tool_description", None)
    code_schema = getattr(workflow, "tool_schema", None)
    if describe is not None and code_schema is not None:
        description = plain_text(describe(tool))
        schema = code_schema(tool) or schema
    return {
        "tool": tool,
        "description": description,
        "schema": schema if isinstance(schema, dict) else {},
        "arguments": evidence.get("arguments"),
    }


def argument_errors(approval, arguments: Any) -> dict[str, str]:
    """The tool's field errors for edited ``arguments`` (``{"arguments.amount": msg}``),
    empty when they fit: the check ``decision_terms`` makes, for showing a diff before
    the approver confirms."""
    evidence = approval.evidence if isinstance(approval.evidence, dict) else {}
    return _validate(approval, str(evidence.get("tool", "")), arguments)


def edited_calls(*run_ids) -> dict[str, dict[str, Any]]:
    """The tool calls of the runs ``run_ids`` an approver let run with other arguments:
    ``{tool_call_id: {"from": model's arguments, "to": arguments used, "by": actor}}``
    (from the ``approval.approved`` events that record ``edited``; one query, and one
    more when there are any)."""
    edits: dict[int, tuple[dict, str]] = {}
    approved = Event.objects.filter(run_id__in=run_ids, type="approval.approved").order_by("seq")
    for event in approved:
        payload = event.payload if isinstance(event.payload, dict) else {}
        if isinstance(payload.get("edited"), dict) and isinstance(payload.get("approval_id"), int):
            edits[payload["approval_id"]] = (payload["edited"], event.actor)
    if not edits:
        return {}
    call_ids = dict(Approval.objects.filter(pk__in=edits).values_list("pk", "evidence"))
    return {
        call_ids[pk]["tool_call_id"]: {"from": edited.get("from"), "to": edited.get("to"), "by": by}
        for pk, (edited, by) in edits.items()
        if isinstance(call_ids.get(pk), dict) and call_ids[pk].get("tool_call_id")
    }


def mark_edited_calls(messages) -> None:
    """Give each tool call (``{"id", "name", "arguments"}``) of ``messages`` (``Message``
    rows, of one or more runs) that an approver let run with other arguments an
    ``edited`` entry (``edited_calls``), in memory, for showing both. The same queries
    whatever the messages hold."""
    run_ids = {m.run_id for m in messages if m.run_id}
    edits = edited_calls(*run_ids) if run_ids else {}
    for message in messages:
        for call in message.tool_calls if isinstance(message.tool_calls, list) else []:
            if isinstance(call, dict) and call.get("id") in edits:
                call["edited"] = edits[call["id"]]


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
