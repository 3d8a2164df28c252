"""The run page's conversation: a page of a thread's messages as a chat, each tool call
as a card with its result (the tool message that answers it) and its ledger row (status,
and the arguments that ran when an approver edited them)."""

from dataclasses import dataclass, field
from typing import Any

from runs.models import Message, Operation

#: Ledger rows read for one page of messages (newest first): enough for the calls of 50
#: messages, bounded whatever the run's length.
OPERATIONS_READ = 500


@dataclass
class ToolCard:
    """One tool call of an assistant message: ``id``, ``name``, the ``arguments`` the
    model asked for, its ``result`` message (``None`` while unanswered or on another
    page) and its ledger row ``operation`` (``None`` when the call has none, e.g. a read
    the workflow did not record). ``ran_with`` holds the arguments that ran when they
    differ from the model's (an approver's edit, ``edited_by`` who), else ``None``."""

    id: str
    name: str
    arguments: Any
    result: Message | None = None
    operation: Operation | None = None
    ran_with: Any = None
    edited_by: str = ""


@dataclass
class ChatItem:
    """A message of the chat with its tool-call ``cards`` (assistant messages)."""

    message: Message
    cards: list[ToolCard] = field(default_factory=list)


def chat(run_id, messages: list[Message]) -> list[ChatItem]:
    """``messages`` (one page of run ``run_id``'s thread, any order) as chat items
    oldest first. A tool message whose call is on the page is shown inside that call's
    card, not on its own. One query: the ledger rows of the runs on the page."""
    ordered = sorted(messages, key=lambda m: (m.seq is None, m.seq or 0, m.pk))
    operations = _operations(run_id, ordered)
    calls: dict[str, ToolCard] = {}
    items = []
    for message in ordered:
        item = ChatItem(message)
        for call in message.tool_calls or []:
            if not isinstance(call, dict):
                continue
            card = ToolCard(
                id=str(call.get("id") or ""),
                name=str(call.get("name") or ""),
                arguments=call.get("arguments"),
            )
            card.operation = _ledger_row(card, operations.get(card.name, []))
            edited = call.get("edited")  # approvals.tool_calls.mark_edited_calls
            if isinstance(edited, dict):
                card.ran_with, card.edited_by = edited.get("to"), str(edited.get("by") or "")
            elif card.operation is not None and card.operation.arguments != card.arguments:
                card.ran_with = card.operation.arguments
            if card.id:
                calls[card.id] = card
            item.cards.append(card)
        answered = calls.get(message.tool_call_id) if message.tool_call_id else None
        if answered is not None and answered.result is None:
            answered.result = message
            continue
        items.append(item)
    return items


def _operations(run_id, messages: list[Message]) -> dict[str, list[Operation]]:
    """``{tool name: [ledger rows, newest first]}`` of run ``run_id`` and the runs of
    ``messages``: one query whatever the page holds (the page costs the same queries
    with or without tool calls)."""
    rows = Operation.objects.filter(
        run_id__in={run_id, *(m.run_id for m in messages if m.run_id)}
    ).order_by("-pk")[:OPERATIONS_READ]
    by_tool: dict[str, list[Operation]] = {}
    for op in rows:
        by_tool.setdefault(op.tool, []).append(op)
    return by_tool


def _ledger_row(card: ToolCard, rows: list[Operation]) -> Operation | None:
    """The ledger row of ``card``: the one keyed by its call id (an agent's calls, whose
    arguments may have been edited), else the newest of the same tool with the same
    arguments (a workflow's own calls)."""
    if card.id:
        for op in rows:
            if op.idempotency_key.endswith(f":tool.{card.id}"):
                return op
    return next((op for op in rows if op.arguments == card.arguments), None)
