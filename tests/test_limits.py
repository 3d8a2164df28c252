"""Flow control across workers: a concurrency limit by customer keeps runs of one
customer apart and in order while another customer's run proceeds; a rate limit holds
four workers to its calls per window, counted where the calls arrive (the loopback
model server), with no failure or retry; a provider's 429 with Retry-After holds back
the other calls to it. Real PostgreSQL and worker subprocesses; the model server is the
outside world. The concurrency limit is also shown on SQLite, the embedded default."""

import json
from datetime import datetime

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

import tests.workflows.limited  # noqa: F401 - registers the workflows here too
from agentops.authoring import StepError, Workflow, WorkflowDefinitionError
from runs.engine.control.lifecycle import ControlError, start_run
from runs.engine.control.replay import replay_run
from runs.engine.data.inbox import post_message
from runs.engine.effects import rate_limits
from runs.engine.state.gateway import run_transaction
from runs.models import RateLimit, Run, Step
from runs.states import RunStatus, StepStatus
from tests.support.deployment_runs import db_rows, shell_json
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.metrics import TOKEN, scrape
from tests.support.openai_server import COMPLETION_TOKENS, PROMPT_TOKENS, ModelServer
from tests.support.states import arrange
from tests.support.waiting import wait_until

MODULE = "tests.workflows.limited"


def _start(d, runs: list[tuple[str, str, dict]]) -> list[str]:
    """Start ``(workflow, thread, input)`` runs in this order; their ids."""
    return shell_json(
        d,
        f"""
from runs.engine.control.lifecycle import start_run
ids = [str(start_run(w, thread_id=t, input=i, actor="test").pk) for w, t, i in {runs!r}]
print(json.dumps(ids))
""",
    )


def _runs(d, ids: list[str]) -> dict[str, tuple]:
    """``{id: (status, started_at, finished_at)}`` of the runs ``ids`` (times as
    datetimes, ``None`` when unset)."""
    rows = shell_json(
        d,
        f"""
from runs.engine.effects import rate_limits
from runs.models import RateLimit, Run
print(json.dumps([[str(r.pk), r.status, r.started_at, r.finished_at]
    for r in Run.objects.filter(pk__in={ids!r})], default=str))
""",
    )
    return {
        pk: (status, *(datetime.fromisoformat(t) if t else None for t in times))
        for pk, status, *times in rows
    }


def _max_in_window(times: list[float], window: float) -> int:
    """The most of ``times`` (seconds) inside any half-open interval ``window`` long."""
    times = sorted(times)
    return max(
        (sum(1 for t in times[i:] if t - start < window) for i, start in enumerate(times)),
        default=0,
    )


def _attempts(d, ids: list[str]) -> set[int]:
    return set(
        shell_json(
            d,
            "from runs.models import Step\n"
            f"print(json.dumps(list(Step.objects.filter(run_id__in={ids!r})"
            ".values_list('attempt', flat=True))))",
        )
    )


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_it_keeps_one_customers_runs_apart_and_in_order_while_another_proceeds(
    deployment_factory, tmp_path, backend
):
    d = deployment_factory(
        backend, {"AGENTOPS_EXTRA_WORKFLOW_MODULES": MODULE, "AGENTOPS_POLL_SECONDS": "0.1"}
    )
    gate = tmp_path / "gate"
    a1, a2, a3, b1 = _start(
        d,
        [
            ("per_customer", "a1", {"customer": "A", "gate": str(gate)}),
            ("per_customer", "a2", {"customer": "A", "seconds": 0.2}),
            ("per_customer", "a3", {"customer": "A", "seconds": 0.2}),
            ("per_customer", "b1", {"customer": "B"}),
        ],
    )
    workers = [d.popen("worker", "--mode", "db", "--concurrency", "2") for _ in range(2)]
    wait_until(
        lambda: _runs(d, [b1])[b1][0] == "SUCCEEDED" and _runs(d, [a1])[a1][0] == "RUNNING",
        what="customer B's run done while A's first runs",
    )
    # Both workers have free slots and poll: A's other runs still wait for the place.
    assert {_runs(d, [a2, a3])[r][0] for r in (a2, a3)} == {"PENDING"}
    waiting = shell_json(
        d,
        "from runs.stats import overview_stats\n"
        "print(json.dumps(overview_stats(storage=False)['limit_waits']))",
    )
    assert waiting == {"concurrency": {"per_customer": 2}, "rate": {}}
    gate.touch()
    wait_until(
        lambda: {s for s, _, _ in _runs(d, [a1, a2, a3]).values()} == {"SUCCEEDED"},
        what="customer A's runs done",
    )
    for w in workers:
        w.terminate()
    runs = _runs(d, [a1, a2, a3, b1])
    # In order of creation, one at a time: each starts after the one before ended.
    assert runs[a1][2] <= runs[a2][1] and runs[a2][2] <= runs[a3][1]
    assert runs[b1][2] < runs[a1][2]
    assert _attempts(d, [a1, a2, a3, b1]) == {1}


def test_a_freed_place_starts_the_next_run_under_rq_without_the_sweeper(
    deployment_factory, tmp_path
):
    # The sweeper's period is far longer than the wait below: only the notification
    # sent when the first run ends can start the second in time.
    d = deployment_factory(
        "postgres", {"AGENTOPS_EXTRA_WORKFLOW_MODULES": MODULE, "AGENTOPS_SWEEP_SECONDS": "600"}
    )
    gate = tmp_path / "gate"
    worker = d.popen("worker", "--mode", "rq", "--concurrency", "2")
    (first,) = _start(d, [("per_customer", "a1", {"customer": "A", "gate": str(gate)})])
    wait_until(lambda: _runs(d, [first])[first][0] == "RUNNING", what="the first run running")
    (second,) = _start(d, [("per_customer", "a2", {"customer": "A"})])
    # Its notification was refused (a free slot, no place) and nothing else is queued
    # that could start it.
    queued = "import django_rq\nprint(json.dumps(django_rq.get_queue().count))"
    refused = "SELECT count(*) FROM runs_step WHERE run_id = %s AND notified_at IS NULL"
    wait_until(
        lambda: db_rows(d, refused, (second,)) == [(1,)] and shell_json(d, queued) == 0,
        what="the second run's notification refused",
    )
    gate.touch()
    wait_until(
        lambda: _runs(d, [second])[second][0] == "SUCCEEDED", timeout=60, what="the second run"
    )
    worker.terminate()
    runs = _runs(d, [first, second])
    assert runs[first][0] == "SUCCEEDED" and runs[first][2] <= runs[second][1]
    assert _attempts(d, [first, second]) == {1}


def _steps(d, ids: list[str]) -> dict[tuple[str, str], tuple]:
    """``{(run id, step name): (status, attempt, started_at, finished_at)}``."""
    rows = shell_json(
        d,
        "from runs.models import Step\n"
        f"print(json.dumps([[str(s.run_id), s.name, s.status, s.attempt, s.started_at, "
        f"s.finished_at] for s in Step.objects.filter(run_id__in={ids!r})], default=str))",
    )
    return {
        (run, name): (status, attempt, *(datetime.fromisoformat(t) if t else None for t in times))
        for run, name, status, attempt, *times in rows
    }


@pytest.mark.parametrize("backend,mode", [("postgres", "rq"), ("sqlite", "db")])
def test_a_step_key_keeps_one_customers_steps_apart_while_the_rest_runs_freely(
    deployment_factory, tmp_path, backend, mode
):
    # Under RQ the sweeper's period is far longer than the wait: only the notification
    # sent when the first keyed step ends can start the second.
    d = deployment_factory(
        backend,
        {
            "AGENTOPS_EXTRA_WORKFLOW_MODULES": MODULE,
            "AGENTOPS_POLL_SECONDS": "0.1",
            "AGENTOPS_SWEEP_SECONDS": "600",
        },
    )
    gate = tmp_path / "gate"
    workers = [d.popen("worker", "--mode", mode, "--concurrency", "2") for _ in range(2)]
    a1, a2, b1 = _start(
        d,
        [
            ("per_customer_step", "a1", {"customer": "A", "gate": str(gate)}),
            ("per_customer_step", "a2", {"customer": "A", "gate": str(gate)}),
            ("per_customer_step", "b1", {"customer": "B", "gate": str(gate)}),
        ],
    )
    ids = [a1, a2, b1]

    def one_a_runs_one_waits() -> tuple[str, str] | None:
        status = {key: row[0] for key, row in _steps(d, ids).items()}
        a_charges = {status.get((r, "charge")): r for r in (a1, a2)}
        if status.get((b1, "charge")) == "RUNNING" and set(a_charges) == {"RUNNING", "PENDING"}:
            return a_charges["RUNNING"], a_charges["PENDING"]
        return None

    # B's keyed step runs beside A's first while A's second waits for the place.
    first, second = wait_until(one_a_runs_one_waits, what="one A charge running, one waiting")
    steps = _steps(d, ids)
    # Every first (unkeyed) step ran; the waiting step counted no attempt.
    assert {steps[(r, "prepare")][0] for r in ids} == {"SUCCEEDED"}
    assert steps[(second, "charge")][1] == 0
    assert _runs(d, [second])[second][0] == "RUNNING"
    waiting = shell_json(
        d,
        "from runs.stats import overview_stats\n"
        "print(json.dumps(overview_stats(storage=False)['limit_waits']))",
    )
    assert waiting == {"concurrency": {"per_customer_step.charge": 1}, "rate": {}}
    gate.touch()
    wait_until(
        lambda: {s for s, _, _ in _runs(d, ids).values()} == {"SUCCEEDED"},
        timeout=60,
        what="every run done",
    )
    for w in workers:
        w.terminate()
    steps = _steps(d, ids)
    assert steps[(first, "charge")][3] <= steps[(second, "charge")][2]
    assert {attempt for _, attempt, _, _ in steps.values()} == {1}


def test_a_rate_limit_holds_four_workers_to_its_calls_per_window(deployment_factory):
    limits = {
        "openai": {"requests": 10, "window_seconds": 2},
        "steps": {"requests": 2, "window_seconds": 2},
    }
    with ModelServer(lambda body: {"content": "hello"}, keep_alive=True) as server:
        d = deployment_factory(
            "postgres",
            {
                "AGENTOPS_EXTRA_WORKFLOW_MODULES": MODULE,
                "AGENTOPS_POLL_SECONDS": "0.1",
                "AGENTOPS_RATE_LIMITS": json.dumps(limits),
                "OPENAI_BASE_URL": server.base_url,
                "OPENAI_API_KEY": "unused",
            },
        )
        model = {"model": "openai:test-model"}
        ids = _start(
            d,
            [("asks_model", f"m{i}", model) for i in range(24)]
            + [("limited_step", f"s{i}", {}) for i in range(4)],
        )
        workers = [d.popen("worker", "--mode", "db", "--concurrency", "3") for _ in range(4)]
        waiting = wait_until(
            lambda: shell_json(
                d,
                "from runs.stats import overview_stats\n"
                "print(json.dumps(overview_stats(storage=False)['limit_waits']['rate']))",
            ).get("openai"),
            what="calls waiting for the openai limit",
        )
        wait_until(
            lambda: {s for s, _, _ in _runs(d, ids).values()} == {"SUCCEEDED"},
            what="every run done",
        )
        for w in workers:
            w.terminate()
        arrivals = list(server.times)
    assert len(arrivals) == 24
    assert _max_in_window(arrivals, 2.0) <= 10
    assert waiting >= 1
    # Waiting is neither a failure nor a retry.
    assert _attempts(d, ids) == {1}
    assert db_rows(d, "SELECT count(*) FROM runs_event WHERE type LIKE 'step.retry%%'") == [(0,)]
    step_times = [
        json.loads(row[0])["at"]
        for row in db_rows(
            d, "SELECT output::text FROM runs_step WHERE name = 'limited' AND status = 'SUCCEEDED'"
        )
    ]
    assert len(step_times) == 4 and _max_in_window(step_times, 2.0) <= 2


def test_a_429_with_retry_after_holds_the_provider_and_asks_again_without_a_retry(
    deployment_factory,
):
    answers = iter([{"status": 429, "headers": {"Retry-After": "2"}, "error": "slow down"}])
    with ModelServer(lambda body: next(answers, None) or {"content": "hello"}) as server:
        d = deployment_factory(
            "postgres",
            {
                "AGENTOPS_EXTRA_WORKFLOW_MODULES": MODULE,
                "AGENTOPS_POLL_SECONDS": "0.1",
                "OPENAI_BASE_URL": server.base_url,
                "OPENAI_API_KEY": "unused",
            },
        )
        model = {"model": "openai:test-model"}
        (first,) = _start(d, [("asks_model", "first", model)])
        worker = d.popen("worker", "--mode", "db", "--concurrency", "3")
        wait_until(
            lambda: db_rows(d, "SELECT name FROM runs_ratelimithold") == [("openai",)],
            what="the provider's hold",
        )
        others = _start(d, [("asks_model", f"o{i}", model) for i in range(2)])
        wait_until(
            lambda: {s for s, _, _ in _runs(d, others).values()} == {"SUCCEEDED"},
            what="the other runs done",
        )
        worker.terminate()
        arrivals = list(server.times)
    # The 429 and one request per run: the held request went again once, in its
    # attempt, under its one ledger row, with no failure and no retry counted.
    assert len(arrivals) == 4
    # The hold began when the 429 was recorded, after it arrived: no call went out
    # within the 2 s it asked for, the held one's own included.
    assert min(arrivals[1:]) - arrivals[0] >= 2.0
    ids = [first, *others]
    assert _attempts(d, ids) == {1}
    ops = "SELECT run_id::text, status FROM runs_operation WHERE side_effect = 'model'"
    assert sorted(db_rows(d, ops)) == sorted((pk, "SUCCEEDED") for pk in ids)
    failures = (
        "SELECT count(*) FROM runs_event WHERE type LIKE 'step.retry%%' "
        "OR type IN ('step.failed', 'model.request_retry')"
    )
    assert db_rows(d, failures) == [(0,)]


def test_a_parents_budget_limits_its_childrens_spending(deployment_factory):
    with ModelServer(lambda body: {"content": "hello"}) as server:
        d = deployment_factory(
            "postgres",
            {
                "AGENTOPS_EXTRA_WORKFLOW_MODULES": MODULE,
                "OPENAI_BASE_URL": server.base_url,
                "OPENAI_API_KEY": "unused",
            },
        )
        # Room for one model request's tokens in the whole family.
        tokens = PROMPT_TOKENS + COMPLETION_TOKENS
        parent = shell_json(
            d,
            f"""
from runs.engine.control.lifecycle import start_run
run = start_run("family_budget", thread_id="fam", actor="test", budget={{"tokens": {tokens}}},
    input={{"model": "openai:test-model", "children": 2}})
print(json.dumps(str(run.pk)))
""",
        )
        # One slot: the two children then ask one after the other. Run at once, both
        # would pass the budget check before either request was charged.
        d.manage("worker", "--burst", "--mode", "db", "--concurrency", "1", check=True)
        requests = server.count
    family = "SELECT id::text, parent_run_id::text, status, tokens, model_calls FROM runs_run"
    rows = {pk: (up, status, used, calls) for pk, up, status, used, calls in db_rows(d, family)}
    children = sorted(v[1:] for pk, v in rows.items() if v[0] == parent)
    # The first child's request was charged to the parent too; the second child's was
    # refused before it went out, and that child paused as its parent would.
    assert requests == 1
    assert children == [("PAUSED", 0, 0), ("SUCCEEDED", tokens, 1)]
    assert rows[parent][1:] == ("WAITING_EXTERNAL", tokens, 1)
    ((payload,),) = db_rows(
        d, "SELECT payload FROM runs_event WHERE type = 'step.budget_exhausted'"
    )
    assert f"parent run {parent}: tokens limit {tokens} reached" in payload["detail"]
    ((suggestion,),) = db_rows(d, "SELECT suggested_action FROM approvals_takeover")
    assert f"runs budget {parent} --add-tokens N" in suggestion

    # Raising the parent's tokens resumes the child paused for them, and the family
    # finishes with one more request.
    with ModelServer(lambda body: {"content": "hello"}) as server:
        d.env["OPENAI_BASE_URL"] = server.base_url
        d.manage("runs", "budget", parent, "--add-tokens", str(tokens), "--reason", "more")
        d.manage("worker", "--burst", "--mode", "db", "--concurrency", "1", check=True)
        assert server.count == 1
    statuses = sorted(r[0] for r in db_rows(d, "SELECT status FROM runs_run"))
    assert statuses == ["SUCCEEDED"] * 3
    assert db_rows(d, "SELECT status, resolution FROM approvals_takeover") == [
        ("RESOLVED", "resume")
    ]


@pytest.mark.django_db
def test_a_concurrency_declaration_and_a_run_without_its_key_are_refused():
    for kwargs in ({"concurrency_limit": 0, "concurrency_key": "c"}, {"concurrency_limit": 2}):
        with pytest.raises(WorkflowDefinitionError, match="concurrency"):
            Workflow("bad", version=1, **kwargs)
        with pytest.raises(WorkflowDefinitionError, match="concurrency"):
            Workflow("bad", version=1).step(**kwargs)(lambda ctx: None)
    # A map step's branches would each need a place: refused at registration.
    with pytest.raises(WorkflowDefinitionError, match="map step 'fan' takes no concurrency_key"):
        Workflow("bad", version=1).map("fan", over=list, concurrency_key="c")(lambda ctx: None)
    with pytest.raises(WorkflowDefinitionError, match="input path or a function"):
        Workflow("bad", version=1).step(concurrency_key=7)(lambda ctx: None)
    # A step's key follows the workflow's rule; a key function that raises or returns
    # what is not a key refuses the run at start, nothing written.
    keyed = Workflow("keyed", version=1, input_fields={"n": int})

    def customer(data):
        return {"A": "A", "list": ["A"]}[data["customer"]]

    keyed.step(concurrency_key=customer)(lambda ctx: None)
    assert keyed.step_concurrency_of(keyed.steps[0], {"customer": "A"}) == ("keyed.<lambda>:A", 1)
    for bad in ({"customer": "list"}, {"customer": "missing"}, {}):
        assert keyed.step_concurrency_of(keyed.steps[0], bad) is None
        assert keyed.validate_input({"n": 1, **bad}) == {
            "input": "must give the concurrency key of step '<lambda>'"
        }
    assert keyed.validate_input({"n": 1, "customer": "A"}) == {}
    with pytest.raises(ControlError) as refused:
        start_run("per_customer_step", thread_id="T", input={"customer": "x" * 201})
    assert refused.value.code == "invalid_input"
    assert refused.value.errors == {
        "input.customer": "must give the concurrency key of step 'charge'"
    }
    assert not Run.objects.exists()
    wf = Workflow("ok", version=1, concurrency_key="customer.id")
    assert wf.concurrency_of({"customer": {"id": 7}}) == ("ok:7", 1)
    assert wf.concurrency_of({"customer": {}}) is None
    assert wf.concurrency_of({"customer": {"id": True}}) is None
    with pytest.raises(ControlError) as refused:
        start_run("per_customer", thread_id="T", input={"customer": "x" * 201})
    assert refused.value.code == "invalid_input"
    assert "input.customer" in refused.value.errors
    assert not Run.objects.exists()
    # A message posted to a thread starts a run from the message alone: refused too.
    with pytest.raises(ControlError) as refused:
        post_message("T", "Hello", workflow="keyed_chat")
    assert refused.value.code == "invalid_input"
    assert not Run.objects.exists()
    # A replay keeps its original's key and limit.
    original = start_run("per_customer", thread_id="T", input={"customer": "A"})
    arrange(Run.objects.filter(pk=original.pk), status=RunStatus.SUCCEEDED)
    again = replay_run(original, actor="test", reason="check", checkpoint="start")
    assert (again.concurrency_key, again.concurrency_limit) == ("per_customer:A", 1)
    # Should a key give no value when its step is scheduled after all (its function
    # changed since the start), scheduling fails with a code and writes nothing.
    run = start_run("per_customer_step", thread_id="T", input={"customer": "A"})
    with pytest.raises(StepError) as failed, run_transaction(run.pk) as tx:
        tx.run.input = {"customer": ""}
        tx.schedule_step("charge", actor="test")
    assert failed.value.code == "CONCURRENCY_KEY_INVALID"
    assert list(Step.objects.filter(run=run).values_list("name", flat=True)) == ["prepare"]


@pytest.mark.django_db
def test_the_overview_and_metrics_show_what_waits_on_each_limit(settings, clients):
    settings.AGENTOPS_METRICS_TOKEN = TOKEN
    settings.AGENTOPS_RATE_LIMITS = {"crm": {"requests": 1, "tokens": None, "window_seconds": 60.0}}
    a1, a2, a3 = (
        start_run("per_customer", thread_id=t, input={"customer": c})
        for t, c in (("a1", "A"), ("a2", "A"), ("b1", "B"))
    )
    arrange(Run.objects.filter(pk=a1.pk), status=RunStatus.RUNNING)
    # Two runs' keyed steps of one customer: one RUNNING, the other waits.
    charges = []
    for thread in ("c1", "c2"):
        run = start_run("per_customer_step", thread_id=thread, input={"customer": "A"})
        with run_transaction(run.pk) as tx:
            charges.append(tx.schedule_step("charge", actor="test"))
    arrange(Step.objects.filter(pk=charges[0]), status=StepStatus.RUNNING)
    assert set(Step.objects.filter(pk__in=charges).values_list("concurrency_key", flat=True)) == {
        "per_customer_step.charge:A"
    }
    samples = scrape()
    waiting = "agentops_limit_waiting"
    assert samples[(waiting, (("kind", "concurrency"), ("limit", "per_customer")))] == 1
    step_limit = (("kind", "concurrency"), ("limit", "per_customer_step.charge"))
    assert samples[(waiting, step_limit)] == 1
    assert samples[(waiting, (("kind", "rate"), ("limit", "crm")))] == 0
    page = clients["alice"].get("/", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="stat-limit-waits"><div class="n">2 / 0<' in page
    assert "per_customer: 1 waiting" in page and "per_customer_step.charge: 1 waiting" in page

    # The admin sets limits too: a row overrides the setting of its name; a limit
    # without a bound is refused and nothing is written.
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    add = "/admin/runs/ratelimit/add/"
    empty = admin.post(
        add, {"name": "search", "requests": "", "tokens": "", "window_seconds": "60"}
    )
    assert empty.status_code == 200 and "Set requests, tokens or both." in empty.content.decode()
    assert not RateLimit.objects.exists()
    for name, requests in (("search", "30"), ("crm", "5")):
        form = {"name": name, "requests": requests, "tokens": "", "window_seconds": "60"}
        assert admin.post(add, form).status_code == 302
    assert rate_limits.configured()["crm"].requests == 5
    samples = scrape()
    assert samples[(waiting, (("kind", "rate"), ("limit", "search")))] == 0
