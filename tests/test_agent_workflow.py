"""The example agent offline, in process: the default model (``sim``) is the agent's
scripted ``FunctionModel``, so the default suite runs it with no network. Decisions on
its tool call: edited arguments are validated by the tool's own schema."""

import json
import threading

import pytest
from django.contrib.auth.models import Permission, User

from approvals.argument_form import canonical
from approvals.services import DecisionConflict, decide
from approvals.tool_calls import decision_terms
from lab.sim import shop
from runs.console.access import form_version
from runs.engine.control.lifecycle import ControlError, start_run
from runs.engine.execution.executor import execute_step
from runs.models import Approval, Event, Message, Operation, Run, Step

# The executor closes stale connections between steps, so data must be committed.
pytestmark = pytest.mark.django_db(transaction=True)

PROMPT = {"prompt": "Order A1001 arrived broken, please refund it"}


@pytest.fixture(autouse=True)
def device_dir(settings, tmp_path):
    settings.AGENTOPS_DEVICE_DIR = tmp_path


@pytest.fixture
def ann():
    user = User.objects.create_user("ann")
    user.user_permissions.add(
        Permission.objects.get(codename="decide_approval"),
        Permission.objects.get(codename="view_run"),
    )
    return User.objects.get(pk=user.pk)


def drain(run: Run, worker) -> Run:
    """Execute the run's due steps in this process until none is left."""
    while True:
        step = Step.objects.filter(run=run, status="PENDING").order_by("seq").first()
        if step is None:
            run.refresh_from_db()
            return run
        execute_step(step.pk, worker)


def test_it_asks_for_approval_offline_and_refunds_the_edited_amount(worker, ann):
    run = drain(start_run("support_agent", thread_id="t-offline", input=PROMPT), worker)
    assert run.status == "WAITING_APPROVAL"
    approval = Approval.objects.get(run=run)
    assert approval.evidence["tool"] == "issue_refund"
    assert approval.evidence["arguments"] == {"order_id": "A1001", "amount": 42.0}
    assert approval.evidence["schema"]["properties"]["amount"]["type"] == "number"

    with pytest.raises(ControlError) as refused:
        decide(approval, decision="approve", user=ann, arguments={"order_id": "A1001"})
    assert refused.value.code == "invalid_arguments"
    assert "arguments.amount" in refused.value.errors
    # The tool's schema holds its rules too: a refund of nothing or less is refused
    # when deciding, not by the refund desk after retries.
    for amount in (0, -5):
        with pytest.raises(ControlError) as refused:
            decide(
                approval,
                decision="approve",
                user=ann,
                arguments={"order_id": "A1001", "amount": amount},
            )
        assert refused.value.code == "invalid_arguments"
        assert "greater than 0" in refused.value.errors["arguments.amount"]
    # Strictly, as the JSON it came in: true or "5" is not an amount (lax: 1.0 and 5.0).
    for amount in (True, "5"):
        with pytest.raises(ControlError) as refused:
            decide(
                approval,
                decision="approve",
                user=ann,
                arguments={"order_id": "A1001", "amount": amount},
            )
        assert list(refused.value.errors) == ["arguments.amount"], amount
    approval.refresh_from_db()
    assert approval.status == "PENDING"

    decide(approval, decision="approve", user=ann, arguments={"order_id": "A1001", "amount": 30})
    run = drain(run, worker)
    assert run.status == "SUCCEEDED"
    assert [r["amount"] for r in shop.refunds_for("A1001")] == ["30.00"]
    models = Operation.objects.filter(run=run, side_effect="model")
    assert models.count() == run.model_calls == 3
    assert run.tokens > 0 and run.unpriced_model_calls == 0  # sim's price per call
    roles = list(Message.objects.filter(run=run).order_by("seq").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_a_repeated_decision_must_carry_the_same_edits_or_is_refused(worker, ann):
    run = drain(start_run("support_agent", thread_id="t-twice", input=PROMPT), worker)
    approval = Approval.objects.get(run=run)
    first = {"order_id": "A1001", "amount": 30}
    decide(approval, decision="approve", user=ann, arguments=first)
    # A retry of the same request is the same decision: no second event.
    decide(approval, decision="approve", user=ann, arguments=dict(first))
    # A correction after the decision is refused, not dropped in silence.
    for later in ({"arguments": {"order_id": "A1001", "amount": 5}}, {"arguments": None}):
        with pytest.raises(DecisionConflict, match="with other edited arguments") as refused:
            decide(approval, decision="approve", user=ann, **later)
        assert refused.value.code == "decision_conflict"
    assert Event.objects.filter(run=run, type="approval.approved").count() == 1
    run = drain(run, worker)
    assert run.status == "SUCCEEDED"
    assert [r["amount"] for r in shop.refunds_for("A1001")] == ["30.00"]


def test_a_repeated_rejection_must_carry_the_same_message_or_is_refused(worker, ann):
    run = drain(start_run("support_agent", thread_id="t-twice-no", input=PROMPT), worker)
    rejected = Approval.objects.get(run=run)
    decide(rejected, decision="reject", user=ann, message="Ask a manager.")
    decide(rejected, decision="reject", user=ann, message="Ask a manager.")
    with pytest.raises(DecisionConflict, match="with other edited arguments or message"):
        decide(rejected, decision="reject", user=ann, message="No.")


def test_it_lets_the_model_read_the_approvers_message_instead(worker, ann):
    run = drain(start_run("support_agent", thread_id="t-respond", input=PROMPT), worker)
    approval = Approval.objects.get(run=run)
    decide(approval, decision="reject", user=ann, message="Refunds above 20 USD need a manager.")
    run = drain(run, worker)
    assert run.status == "SUCCEEDED"
    assert shop.refunds_for("A1001") == []
    last = Message.objects.filter(run=run).order_by("-seq").first()
    assert last.content == "I did not issue the refund: Refunds above 20 USD need a manager."


def test_the_console_form_edits_arguments_and_refuses_ones_that_do_not_fit(worker, ann):
    from django.test import Client
    from django.urls import reverse

    run = drain(start_run("support_agent", thread_id="t-console", input=PROMPT), worker)
    approval = Approval.objects.get(run=run)
    client = Client()
    client.force_login(ann)
    inbox = client.get(reverse("console:approvals")).content.decode()
    assert 'name="arguments"' in inbox and "&quot;amount&quot;: 42.0" in inbox
    assert 'name="arg-amount"' in inbox and 'value="42.0"' in inbox

    url = reverse("console:decide", args=[approval.pk])
    form = {"decision": "approve", "run_version": form_version(Run.objects.get(pk=run.pk))}
    refused = client.post(url, {**form, "arguments": '{"order_id": "A1001", "amount": "x"}'})
    assert refused.status_code == 400
    assert "Input should be a valid number" in refused.content.decode()
    approval.refresh_from_db()
    assert approval.status == "PENDING"

    edited = {"order_id": "A1001", "amount": 12.5}
    shown = client.post(
        url, {**form, "edit_mode": "form", "arg-order_id": "A1001", "arg-amount": "12.5"}
    )
    assert (
        shown.status_code == 200
        and "Confirm approve with these arguments" in shown.content.decode()
    )
    assert Approval.objects.get(pk=approval.pk).status == "PENDING"
    accepted = client.post(
        url,
        {**form, "arguments": json.dumps(edited), "confirm_arguments": canonical(edited)},
    )
    assert accepted.status_code == 302
    run = drain(run, worker)
    assert [r["amount"] for r in shop.refunds_for("A1001")] == ["12.50"]


@pytest.fixture
def slow_tool_agent():
    """An agent whose ``slow_count`` tool (a read, timeout 0.3 s) waits for ``release``
    (up to 10 s) before answering; the test releases it at the end."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from agentops.authoring import AgentTool, register_agent
    from runs.workflows import registry

    release = threading.Event()

    def script(messages, info):
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("slow_count", {}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("counted")])

    agent = Agent(name="slow")

    @agent.tool_plain
    def slow_count() -> int:
        """Count slowly."""
        release.wait(10)
        return 3

    register_agent(
        agent,
        name="slow_tool_agent",
        tools={"slow_count": AgentTool(side_effect="read", timeout=0.3)},
        offline_model=FunctionModel(script),
    )
    yield release
    release.set()
    registry.unregister("slow_tool_agent", 1)


def test_an_agent_tools_declared_timeout_is_enforced(worker, slow_tool_agent):
    run = start_run("slow_tool_agent", thread_id="slow", input={"prompt": "count"})
    step = Step.objects.get(run=run, name="agent")
    execute_step(step.pk, worker)
    step.refresh_from_db()
    assert step.error_code == "TIMEOUT"
    assert "exceeded its timeout of 0.3s" in step.error_detail
    # A read: retried under the same key, its row left for the next attempt.
    (call,) = Operation.objects.filter(run=run, tool="slow_count")
    assert (call.status, step.status) == ("INTENT", "PENDING")


@pytest.mark.parametrize(
    ("extra", "fields"),
    [
        ({"message": "m"}, {"message"}),
        ({"arguments": {"order_id": "A1001"}}, {"arguments"}),
        ({"arguments": {}, "message": "m"}, {"arguments", "message"}),
    ],
)
def test_it_names_the_field_a_plain_approval_does_not_take(extra, fields):
    plain = Approval(evidence={"kind": "publish"})  # not an agent's tool call
    with pytest.raises(ControlError) as refused:
        decision_terms(plain, "approve", **extra)
    assert refused.value.code == "invalid_decision"
    assert set(refused.value.errors) == fields


def test_it_names_the_field_that_goes_with_the_other_decision(worker, ann):
    run = drain(start_run("support_agent", thread_id="t-fields", input=PROMPT), worker)
    approval = Approval.objects.get(run=run)
    with pytest.raises(ControlError) as refused:
        decide(approval, decision="approve", user=ann, message="m")
    assert (refused.value.code, set(refused.value.errors)) == ("invalid_decision", {"message"})
    with pytest.raises(ControlError) as refused:
        decide(approval, decision="reject", user=ann, arguments={"order_id": "A1001"})
    assert (refused.value.code, set(refused.value.errors)) == ("invalid_decision", {"arguments"})
    approval.refresh_from_db()
    assert approval.status == "PENDING"


def test_an_api_client_approves_with_edited_arguments_and_rejects_with_a_message(worker, ann):
    from agentops_client import ApiError
    from apitokens.services import create_token
    from tests.support.api_client import in_process_client

    ann.is_staff = True  # a staff token sees the runs started without an owner
    ann.save()
    api = in_process_client(create_token(ann)[1])
    edited = drain(start_run("support_agent", thread_id="t-api-edit", input=PROMPT), worker)
    answered = drain(start_run("support_agent", thread_id="t-api-no", input=PROMPT), worker)
    [approval] = api.run_approvals(str(edited.pk))
    assert approval.evidence["arguments"] == {"order_id": "A1001", "amount": 42.0}

    with pytest.raises(ApiError) as refused:
        api.approve(approval, arguments={"order_id": "A1001", "amount": "x"})
    assert (refused.value.status, refused.value.code) == (422, "invalid_arguments")
    assert refused.value.errors == {"arguments.amount": "Input should be a valid number"}
    decided = api.approve(approval, arguments={"order_id": "A1001", "amount": 12.5})
    assert (decided.status, decided.decided_by) == ("APPROVED", "ann")
    assert drain(edited, worker).status == "SUCCEEDED"
    assert [r["amount"] for r in shop.refunds_for("A1001")] == ["12.50"]

    [question] = api.run_approvals(str(answered.pk))
    assert api.reject(question, message="Refunds above 20 USD need a manager.").status == (
        "REJECTED"
    )
    assert drain(answered, worker).status == "SUCCEEDED"
    assert [r["amount"] for r in shop.refunds_for("A1001")] == ["12.50"]
    last = Message.objects.filter(run=answered).order_by("-seq").first()
    assert last.content == "I did not issue the refund: Refunds above 20 USD need a manager."
