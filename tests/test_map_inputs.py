"""Bad input to a map step is refused clearly and stores nothing: a malformed
declaration at import, a ``fanout_demo`` input out of range at start, and items that
are not a list (or too many) fail the step for good with a machine-readable code."""

import pytest

from agentops.authoring import MAX_BRANCHES, Workflow, WorkflowDefinitionError, register
from runs.engine.control.lifecycle import ControlError, start_run
from runs.models import Run, Step
from runs.workflows import registry
from tests.support.in_process import run_worker_in_process

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_malformed_map_declaration_is_refused():
    workflow = Workflow("bad_map", version=1)
    with pytest.raises(WorkflowDefinitionError, match="over= must be callable"):
        workflow.map(over=[1, 2])
    with pytest.raises(WorkflowDefinitionError, match="on_failure must be fail or partial"):
        workflow.map(over=lambda ctx: [], on_failure="ignore")


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"items": 5}, {"input.delay_s": "is required"}),
        ({"items": 5, "delay_s": "x"}, {"input.delay_s": "must be int or float"}),
        ({"items": -1, "delay_s": 0}, {"input.items": f"must be from 0 to {MAX_BRANCHES}"}),
        ({"items": MAX_BRANCHES + 1, "delay_s": 0}, {"input.items": "must be from 0 to 10000"}),
        ({"items": 3, "delay_s": 61}, {"input.delay_s": "must be from 0 to 60"}),
        # JSON's true/false are not numbers, although Python counts them as ints.
        ({"items": True, "delay_s": 0}, {"input.items": "must be int"}),
        ({"items": 2, "delay_s": False}, {"input.delay_s": "must be int or float"}),
    ],
)
def test_fanout_demo_refuses_input_out_of_range_at_start(data, error):
    with pytest.raises(ControlError) as refused:
        start_run("fanout_demo", thread_id="bad", input=data)
    assert refused.value.code == "invalid_input"
    assert refused.value.errors == error
    assert not Run.objects.exists()


@pytest.fixture
def odd_maps():
    """Map steps whose ``over`` returns a dict, or one item too many."""
    names = []
    for name, over in (
        ("map_of_dict", lambda ctx: {"a": 1}),
        ("map_too_long", lambda ctx: list(range(MAX_BRANCHES + 1))),
    ):
        workflow = Workflow(name, version=1)
        workflow.map("work", over=over)(lambda ctx: ctx.item)
        workflow.step("join")(lambda ctx: ctx.outputs["work"])
        register(workflow)
        names.append(name)
    yield names
    for name in names:
        registry.unregister(name, 1)


def test_items_that_are_not_a_list_or_too_many_fail_the_step_and_fan_out_nothing(odd_maps):
    runs = [start_run(name, thread_id=name, input={}) for name in odd_maps]
    while run_worker_in_process():
        pass
    outcomes = [(r.status, r.error_code) for r in Run.objects.filter(pk__in=[r.pk for r in runs])]
    assert sorted(outcomes) == [("FAILED", "INVALID_ITEMS"), ("FAILED", "TOO_MANY_BRANCHES")]
    assert not Step.objects.filter(branch_of__isnull=False).exists()
    assert not Step.objects.filter(name="join").exists()
