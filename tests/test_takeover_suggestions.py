"""A takeover opened by a failed step suggests what fits its error's class: a retryable
code names the dependency, an input error fixing the input, an access error the
credentials, a fault of the code or the model's answer a fix, any other code reading
the error. Real database, in-process executor."""

import pytest

from agentops.authoring import RetryPolicy, StepError, Workflow, register
from runs.engine.control.lifecycle import start_run
from runs.engine.effects import retry
from runs.engine.execution import executor
from runs.models import Step, Takeover
from runs.states import RunStatus

fails = Workflow("fails_for_a_person", version=1, input_fields={"code": str})


@fails.step(retry=RetryPolicy(max_attempts=1), on_exhausted="takeover")
def act(ctx):
    raise StepError(ctx.input["code"], "as asked")


register(fails)


def test_it_chooses_the_suggestion_by_the_codes_class():
    assert retry.suggested_action("DEPENDENCY_UNAVAILABLE") == retry.SUGGEST_DEPENDENCY
    assert retry.suggested_action("MY_CODE", frozenset({"MY_CODE"})) == retry.SUGGEST_DEPENDENCY
    for code in retry.INPUT_CODES:
        assert retry.suggested_action(code) == retry.SUGGEST_INPUT
    for code in retry.ACCESS_CODES:
        assert retry.suggested_action(code) == retry.SUGGEST_ACCESS
    for code in retry.CODE_FAULT_CODES:
        assert retry.suggested_action(code) == retry.SUGGEST_CODE_FAULT
    assert retry.suggested_action("MY_CODE") == retry.SUGGEST_OTHER
    assert "input" in retry.SUGGEST_INPUT and "dependency" not in retry.SUGGEST_INPUT
    # Every class is a class of never-retried codes.
    classes = retry.INPUT_CODES | retry.ACCESS_CODES | retry.CODE_FAULT_CODES
    assert classes <= retry.NON_RETRYABLE_CODES


@pytest.mark.django_db(transaction=True)
def test_a_takeover_suggests_what_fits_the_steps_error(worker):
    expected = {
        "INVALID_ARGUMENT": retry.SUGGEST_INPUT,
        "TIMEOUT": retry.SUGGEST_DEPENDENCY,
        "PERMISSION_DENIED": retry.SUGGEST_ACCESS,
        "INTERNAL": retry.SUGGEST_CODE_FAULT,
        "TICKET_CLOSED": retry.SUGGEST_OTHER,
    }
    got = {}
    for code in expected:
        run = start_run("fails_for_a_person", thread_id=f"t-{code}", input={"code": code})
        assert executor.execute_step(Step.objects.get(run=run).pk, worker).claimed
        run.refresh_from_db()
        assert run.status == RunStatus.PAUSED
        takeover = Takeover.objects.get(run=run)
        assert (takeover.cause, takeover.evidence["error_code"]) == ("retries_exhausted", code)
        got[code] = takeover.suggested_action
    assert got == expected
