"""Each attempt's log: what a step's code logs and prints (through ``logging``, stdout,
stderr and the tools it calls) is stored with its attempt by real worker subprocesses,
kept apart between steps that run at once in one process's slots, holds a failed
attempt's traceback, keeps the newest ``AGENTOPS_ATTEMPT_LOG_BYTES``, and is shown
escaped on the console and by the API."""

import logging
import signal
import subprocess

import pytest
from django.urls import reverse

import tests.workflows.chatty  # noqa: F401 - registers the chatty workflow here too
from agentops_client import ApiError
from apitokens.services import create_token
from runs.engine.control.lifecycle import start_run
from runs.engine.execution import aio
from runs.engine.execution.attempt_logs import AttemptLogBuffer, capturing
from runs.models import AttemptLog, Run, Step
from tests.support.api_client import in_process_client
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_subprocess, worker_subprocess_env
from tests.support.services import REPO_ROOT, manage_argv
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CHATTY = {"AGENTOPS_EXTRA_WORKFLOW_MODULES": "tests.workflows.chatty"}


def _chatty(thread: str, **input) -> Run:
    return start_run("chatty", thread_id=thread, input=input, actor="test")


def _log(run: Run) -> AttemptLog:
    return AttemptLog.objects.get(run=run)


def test_a_step_that_logs_and_prints_has_its_lines_in_its_attempts_log(settings):
    run = _chatty("logs-1", tag="alpha")
    done = run_worker_subprocess(worker_subprocess_env(settings, **CHATTY))
    assert done.returncode == 0, done.stdout + done.stderr
    run.refresh_from_db()
    assert run.status == "SUCCEEDED"

    log = _log(run)
    assert log.attempt == 1 and log.step.name == "speak"
    for line in [
        "logged alpha",
        "printed alpha",
        "stderr alpha",
        "tool says alpha",
        "tool logs alpha",
    ]:
        assert line in log.text, log.text
    # NUL cannot be stored in PostgreSQL text: it is kept escaped.
    assert "nul \\u0000 here" in log.text
    assert not log.truncated
    # The worker's own progress line still reaches its stdout, and the step's do not.
    assert "ENTER speak" in done.stdout
    assert "printed alpha" not in done.stdout


def test_two_steps_in_one_process_keep_their_own_logs(settings, tmp_path):
    gate = tmp_path / "gate"
    runs = [_chatty(f"logs-{tag}", tag=tag, gate=str(gate)) for tag in ("red", "blue")]
    worker = subprocess.Popen(
        manage_argv("worker", "--mode", "db", "--concurrency", 2),
        env=worker_subprocess_env(settings, AGENTOPS_POLL_SECONDS=0.1, **CHATTY),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        held = wait_until(
            lambda: set(
                Step.objects.filter(run__in=runs, status="RUNNING").values_list("owner", flat=True)
            )
            if Step.objects.filter(run__in=runs, status="RUNNING").count() == 2
            else None,
            what="both steps in flight at once",
        )
        assert len(held) == 1  # one process holds both
        wait_until(
            lambda: all((tmp_path / f"gate.{tag}").exists() for tag in ("red", "blue")),
            what="both steps writing",
        )
        gate.touch()
        wait_until(
            lambda: AttemptLog.objects.filter(run__in=runs).count() == 2,
            what="both attempts' logs stored",
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, out + err

    red, blue = (_log(r) for r in runs)
    assert "printed red" in red.text and "waiting red 1" in red.text, red.text
    assert "printed blue" in blue.text and "waiting blue 1" in blue.text, blue.text
    assert "blue" not in red.text, red.text
    assert "red" not in blue.text, blue.text
    assert "waiting" not in out


def test_a_failing_attempt_keeps_its_traceback(settings):
    run = _chatty("logs-fail", tag="oops", fail=True)
    env = worker_subprocess_env(settings, **CHATTY)
    done = run_worker_subprocess(env)
    assert done.returncode == 0, done.stdout + done.stderr

    logs = list(AttemptLog.objects.filter(run=run).order_by("attempt"))
    assert logs, "no attempt log stored"
    first = logs[0]
    assert first.attempt == 1
    assert "printed oops" in first.text
    assert "Traceback (most recent call last)" in first.text
    assert "ValueError: broken on purpose oops" in first.text


def test_a_step_printing_a_megabyte_keeps_the_newest_64_kb(settings):
    run = _chatty("logs-flood", tag="flood", flood_bytes=1_000_000)
    done = run_worker_subprocess(worker_subprocess_env(settings, **CHATTY))
    assert done.returncode == 0, done.stdout + done.stderr

    log = _log(run)
    assert log.truncated
    assert log.total_bytes > 1_000_000
    assert len(log.text.encode()) == settings.AGENTOPS_ATTEMPT_LOG_BYTES == 65536
    assert log.text.endswith("last line of flood\n")
    assert "FIRST" not in log.text and "printed flood" not in log.text


def test_the_bound_cuts_at_a_whole_character_and_keeps_storable_text():
    buffer = AttemptLogBuffer(1024)
    buffer.write("é" * 2000)  # 4000 bytes of two-byte characters
    buffer.write("lone \ud800 surrogate and \x00 NUL\n")
    text = buffer.text()
    assert buffer.truncated
    assert len(text.encode()) <= 1024
    assert text.endswith("lone \\ud800 surrogate and \x00 NUL\n")
    assert text.startswith("é")


def test_async_code_on_the_process_loop_writes_to_its_attempts_log():
    async def speak():
        logging.getLogger("chatty.async").warning("said on the shared loop")

    with capturing() as log:
        aio.run(speak(), timeout=30)
    with capturing() as other:
        pass
    assert "said on the shared loop" in log.text()
    assert other.text() == ""


def test_the_log_is_one_click_away_and_escaped(settings, clients):
    run = _chatty("logs-html", tag="<script>alert(1)</script>")
    done = run_worker_subprocess(worker_subprocess_env(settings, **CHATTY))
    assert done.returncode == 0, done.stdout + done.stderr
    step = Step.objects.get(run=run)

    url = reverse("console:attempt_log", args=[run.pk, step.pk, 1])
    page = clients["alice"].get(reverse("console:run", args=[run.pk])).content.decode()
    assert f'href="{url}"' in page

    shown = clients["alice"].get(url)
    assert shown.status_code == 200
    body = shown.content.decode()
    assert "printed &lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<script>alert(1)</script>" not in body

    fragment = clients["alice"].get(url, HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<div class="attempt-log"')
    assert "&lt;script&gt;" in fragment

    missing = clients["alice"].get(reverse("console:attempt_log", args=[run.pk, step.pk, 2]))
    assert missing.status_code == 200
    assert "No log stored for this attempt" in missing.content.decode()


def test_the_api_serves_an_attempts_log(settings, actors):
    run = _chatty("logs-api", tag="api")
    done = run_worker_subprocess(worker_subprocess_env(settings, **CHATTY))
    assert done.returncode == 0, done.stdout + done.stderr
    step = Step.objects.get(run=run)
    api = in_process_client(create_token(actors["bob"])[1])

    log = api.attempt_log(str(run.pk), step.pk, 1)
    assert log.step_id == step.pk and log.attempt == 1
    assert "printed api" in log.text
    assert log.truncated is False
    # Every byte written is kept; the one NUL is stored as its 6-character escape.
    assert log.total_bytes == len(log.text.encode()) - 5

    with pytest.raises(ApiError) as missing:
        api.attempt_log(str(run.pk), step.pk, 2)
    assert (missing.value.status, missing.value.code) == (404, "not_found")
