"""The run page's conversation: messages as a chat, each tool call as a card holding
its result and its ledger status; a call whose ledger row ran with other arguments (an
approver's edit) shows both, marked edited; agent output stays text."""

import re

import pytest
from django.urls import reverse

from runs.models import Message, Operation
from tests.support.in_process import (
    actors,
    clients,
    device_dir,
    fast_passwords,
    run_worker_in_process,
    start_room_temperature,
)

__all__ = ["actors", "clients", "device_dir", "fast_passwords"]

# The worker runs its own transactions (and a liveness connection): no test transaction.
pytestmark = pytest.mark.django_db(transaction=True)


def _card(html: str, call_id: str) -> str:
    match = re.search(
        rf'<section class="tool-call" id="call-{re.escape(call_id)}".*?</section>', html, re.S
    )
    assert match, f"no card for {call_id}"
    return match.group(0)


def test_a_tool_call_is_a_card_with_its_result_and_ledger_status(clients):
    run = start_room_temperature("T-chat")
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "SUCCEEDED"
    html = clients["alice"].get(reverse("console:run", args=[run.pk])).content.decode()
    messages = list(Message.objects.filter(run=run).order_by("seq"))
    [call_message] = [m for m in messages if m.tool_calls]
    [call] = call_message.tool_calls
    [result] = [m for m in messages if m.tool_call_id == call["id"]]
    card = _card(html, call["id"])
    assert call["name"] in card and "SUCCEEDED" in card
    assert "23.5" in card and f"result (#{result.seq})" in card
    # The answer sits in its card, not a second time on its own.
    assert f'id="msg-{result.message_id}"' not in html
    # Chat order: the question, the call, the reply.
    order = [html.index(f'id="msg-{m.message_id}"') for m in messages if m != result]
    assert order == sorted(order)
    assert "arguments edited" not in card


def test_an_edited_call_shows_what_the_model_asked_and_what_ran(clients):
    run = start_room_temperature("T-edit")
    run_worker_in_process()
    asked = {"order_id": "A1", "amount": 500, "note": "<script>alert(1)</script>"}
    ran = {"order_id": "A1", "amount": 50, "note": "<script>alert(1)</script>"}
    Message.objects.create(
        thread=run.thread, run=run, seq=90, message_id="msg_edit", role="assistant",
        content="", tool_calls=[{"id": "call_7", "name": "issue_refund", "arguments": asked}],
    )  # fmt: skip
    Operation.objects.create(
        run=run, idempotency_key=f"{run.pk}:1:agent.2:tool.call_7", tool="issue_refund",
        side_effect="unsafe", arguments=ran, status="SUCCEEDED", result={"refund": "R1"},
    )  # fmt: skip
    html = clients["alice"].get(reverse("console:run", args=[run.pk])).content.decode()
    card = _card(html, "call_7")
    assert '<span class="edited-mark">arguments edited</span>' in card
    ran, asked = card.split("the model asked")
    assert "50" in ran and "500" in asked
    assert "500" in card and "50" in card and "R1" in card
    assert "<script>alert" not in card and "&lt;script&gt;alert(1)&lt;/script&gt;" in card
