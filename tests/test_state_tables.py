"""Every allowed and every forbidden transition of the run and step tables, applied
through the gateway's conditional UPDATE (not just looked up in the table)."""

import itertools

import pytest

from runs.engine.control.lifecycle import start_run
from runs.engine.state.gateway import run_transaction, transition_run
from runs.models import Event, Run, Step
from runs.states import (
    RUN_TERMINAL,
    RUN_TRANSITIONS,
    STEP_TRANSITIONS,
    IllegalTransition,
    RunStatus,
    StepStatus,
)
from tests.support.states import arrange

pytestmark = pytest.mark.django_db

RUN_PAIRS = list(itertools.product(RunStatus.values, RunStatus.values))
STEP_PAIRS = list(itertools.product(StepStatus.values, StepStatus.values))


@pytest.fixture
def run():
    return start_run("room_temperature", thread_id="t-states", input={"question": "warm?"})


def test_it_has_a_row_for_every_state():
    assert set(RUN_TRANSITIONS) == set(RunStatus.values)
    assert set(STEP_TRANSITIONS) == set(StepStatus.values)


def test_it_keeps_terminal_run_states_final():
    for state in RUN_TERMINAL:
        assert RUN_TRANSITIONS[state] == frozenset()


@pytest.mark.parametrize(("source", "target"), RUN_PAIRS)
def test_it_applies_exactly_the_allowed_run_transitions(run, source, target):
    arrange(Run.objects.filter(pk=run.pk), status=source)
    before = Run.objects.get(pk=run.pk)
    allowed = target in RUN_TRANSITIONS[source]
    if allowed:
        assert transition_run(run.pk, target, expected=source, actor="test") is True
        after = Run.objects.get(pk=run.pk)
        assert after.status == target
        assert after.version == before.version + 1
        last = Event.objects.filter(run=run).order_by("-seq").first()
        assert last.type == f"run.{target.lower()}"
        assert last.payload["from"] == source
    elif source in RUN_TERMINAL:
        assert transition_run(run.pk, target, expected=source, actor="test") is False
        after = Run.objects.get(pk=run.pk)
        assert (after.status, after.version) == (source, before.version)
        last = Event.objects.filter(run=run).order_by("-seq").first()
        assert last.type == "transition.rejected"
        assert last.payload == {
            "entity": "run",
            "from": source,
            "to": target,
            "reason": "run is terminal",
        }
    else:
        with pytest.raises(IllegalTransition):
            transition_run(run.pk, target, expected=source, actor="test")
        after = Run.objects.get(pk=run.pk)
        assert (after.status, after.version) == (source, before.version)


@pytest.mark.parametrize(("source", "target"), STEP_PAIRS)
def test_it_applies_exactly_the_allowed_step_transitions(run, source, target):
    step = Step.objects.get(run=run)
    arrange(Step.objects.filter(pk=step.pk), status=source)
    events_before = Event.objects.filter(run=run).count()
    if target in STEP_TRANSITIONS[source]:
        with run_transaction(run.pk) as tx:
            moved = tx.transition_step(step.pk, target, expected=source, actor="test")
        assert moved is True
        assert Step.objects.get(pk=step.pk).status == target
        assert (
            Event.objects.filter(run=run).order_by("-seq").first().type == f"step.{target.lower()}"
        )
    else:
        with pytest.raises(IllegalTransition), run_transaction(run.pk) as tx:
            tx.transition_step(step.pk, target, expected=source, actor="test")
        assert Step.objects.get(pk=step.pk).status == source
        assert Event.objects.filter(run=run).count() == events_before


def test_it_refuses_a_step_move_when_someone_else_moved_first(run):
    step = Step.objects.get(run=run)
    arrange(Step.objects.filter(pk=step.pk), status=StepStatus.SUCCEEDED)
    with run_transaction(run.pk) as tx:
        moved = tx.transition_step(
            step.pk, StepStatus.RUNNING, expected=StepStatus.PENDING, actor="test"
        )
    assert moved is False
    assert Step.objects.get(pk=step.pk).status == StepStatus.SUCCEEDED


def test_it_refuses_a_run_move_from_a_stale_expected_state(run):
    transition_run(run.pk, RunStatus.RUNNING, expected=RunStatus.PENDING, actor="a")
    assert transition_run(run.pk, RunStatus.RUNNING, expected=RunStatus.PENDING, actor="b") is False
    assert Run.objects.get(pk=run.pk).version == 1


def test_it_numbers_events_without_gaps(run):
    for _ in range(3):
        transition_run(
            run.pk, RunStatus.PAUSED, expected=RunStatus.PENDING, actor="t"
        ) or transition_run(run.pk, RunStatus.RUNNING, expected=RunStatus.PAUSED, actor="t")
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert Run.objects.get(pk=run.pk).event_seq == len(seqs)
