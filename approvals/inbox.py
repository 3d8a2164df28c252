"""What the approvals inbox shows of each pending approval: the conversation that led
to an agent's tool call, the tool's description, its arguments as a form generated from
the tool's schema, and how long is left before the approval expires.

A card may carry what an approver just posted (an edit the tool refused, with the
field errors; an edit waiting for confirmation, with its diff), so the page answers a
decision in place and keeps the edit.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from approvals import argument_form
from approvals.tool_calls import tool_facts
from runs.engine.service import db_now
from runs.models import Approval, Message

#: Messages of the conversation shown above a tool call (the newest up to the call).
CONTEXT_MESSAGES = 6
#: Messages read back from the call to find those (a bound on one approval's query).
CONTEXT_SCAN = 200


@dataclass
class EditState:
    """What an approver posted on one card: the ``arguments`` wanted, the tool's field
    ``errors`` (refused edit), a ``diff`` to confirm (accepted by the schema, not yet
    confirmed), the form ``mode`` (``form`` or ``json``), the raw JSON text, the comment
    and the message as typed, and a general ``error`` (JSON that does not parse)."""

    arguments: Any = None
    errors: dict[str, str] = field(default_factory=dict)
    diff: list[dict[str, Any]] = field(default_factory=list)
    mode: str = "form"
    raw: str = ""
    comment: str = ""
    message: str = ""
    error: str = ""


def conversation(approval: Approval, tool_call_id: str) -> list[Message]:
    """The last ``CONTEXT_MESSAGES`` final messages of ``approval``'s run up to and
    including the one that made tool call ``tool_call_id`` (all of the newest when no
    message made it), oldest first."""
    messages = list(
        Message.objects.filter(run_id=approval.run_id, seq__isnull=False)
        .exclude(status=Message.Status.SUPERSEDED)
        .order_by("-seq")[:CONTEXT_SCAN]
    )
    for index, message in enumerate(messages):
        calls = message.tool_calls if isinstance(message.tool_calls, list) else []
        if any(isinstance(c, dict) and c.get("id") == tool_call_id for c in calls):
            messages = messages[index:]
            break
    return list(reversed(messages[:CONTEXT_MESSAGES]))


def seconds_left(approval: Approval, now) -> int | None:
    """Whole seconds until ``approval`` expires at ``now`` (the database clock; 0 or
    less: expired), ``None`` when it never expires."""
    if approval.expires_at is None:
        return None
    return int((approval.expires_at - now).total_seconds())


def attach_cards(approvals: list[Approval], edits: dict[int, EditState] | None = None) -> None:
    """Give each approval the view-only attributes its card reads: ``expired``,
    ``seconds_left``, and for an agent's tool call ``tool`` (``tool_facts``),
    ``conversation``, ``fields`` (the generated form), ``raw_arguments`` (JSON text)
    and ``edit`` (an ``EditState``, posted or fresh)."""
    now = db_now()
    edits = edits or {}
    for approval in approvals:
        left = seconds_left(approval, now)
        approval.seconds_left = left  # type: ignore[attr-defined]
        # The engine's expiry rule (``with_shown_status``) decides where the list
        # applied it; the countdown only covers lists that did not.
        shown = getattr(approval, "shown_status", None)
        approval.expired = (  # type: ignore[attr-defined]
            shown == "EXPIRED" if shown is not None else left is not None and left <= 0
        )
        evidence = approval.evidence if isinstance(approval.evidence, dict) else {}
        if evidence.get("kind") != "tool_call":
            continue
        facts = tool_facts(approval)
        edit = edits.get(approval.pk) or EditState(arguments=facts["arguments"])
        shown = edit.arguments if isinstance(edit.arguments, dict) else facts["arguments"]
        approval.tool = facts  # type: ignore[attr-defined]
        approval.edit = edit  # type: ignore[attr-defined]
        approval.conversation = conversation(  # type: ignore[attr-defined]
            approval, str(evidence.get("tool_call_id", ""))
        )
        approval.fields = argument_form.fields_for(  # type: ignore[attr-defined]
            facts["schema"], shown, asked=facts["arguments"], errors=edit.errors
        )
        approval.raw_arguments = edit.raw or json.dumps(  # type: ignore[attr-defined]
            shown, indent=1, ensure_ascii=False
        )
        approval.previewed = (  # type: ignore[attr-defined]
            argument_form.canonical(edit.arguments) if edit.diff else ""
        )
