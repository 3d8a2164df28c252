"""Stored text printed by a command never acts on the operator's terminal: controls, ESC
sequences, ``\\r`` and bidirectional overrides come out as ``\\uXXXX`` escapes, a long
message is cut with its length, and ``--json`` stays whole and the same value."""

import io
import json
import logging
import unicodedata

import pytest
from django.core.management import call_command

from runs.cli.terminal import is_unsafe, terminal_text
from runs.engine.control.lifecycle import start_run
from runs.engine.execution import executor
from runs.engine.rules import BIDI_CONTROLS
from runs.models import Message, Step

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = "\x1b[2J\x1b]0;PWNED\x07\x1b[31mred\u202eevil\r\rhidden\x9b\x7f\u2066\u2028end"


def _out(*args) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def _unsafe(text: str) -> list[str]:
    return sorted({hex(ord(c)) for c in text if is_unsafe(c) and c != "\n"})


@pytest.fixture
def hostile_run(worker):
    question = HOSTILE + "x" * 60_000
    run = start_run("room_temperature", thread_id="hostile", input={"question": question})
    # The first step stores the question as the run's first message.
    executor.execute_step(Step.objects.get(run=run, name="plan").pk, worker)
    return run


@pytest.mark.parametrize(
    "args",
    [
        ("runs", "status", "{run}"),
        ("runs", "status", "{run}", "--json"),
        ("runs", "list"),
        ("runs", "list", "--json"),
        ("runs", "list", "--q", HOSTILE),
        ("runs", "checkpoints", "{run}"),
        ("runs", "message", "--thread", "hostile", HOSTILE),
        ("approvals", "list"),
        ("workers",),
    ],
)
def test_no_command_prints_a_raw_control_character(hostile_run, args):
    args = [a.replace("{run}", str(hostile_run.pk)) for a in args]
    printed = _out(*args)
    assert _unsafe(printed) == []
    if "--json" in args:
        json.loads(printed)  # still one JSON document


def test_a_long_message_is_escaped_and_cut_with_its_length(hostile_run):
    [stored] = [m for m in Message.objects.filter(run=hostile_run) if len(m.content) > 60_000]
    printed = _out("runs", "status", str(hostile_run.pk))
    line = next(line for line in printed.splitlines() if "xxxx" in line)
    assert "\\u001b[2J\\u001b]0;PWNED\\u0007" in line and "\\u202eevil\\u000d\\u000d" in line
    assert line.endswith(f"... ({len(terminal_text(stored.content))} characters)")
    assert len(line) < 600
    # The escapes are JSON's: a --json document keeps its value through the formatter.
    assert json.loads(terminal_text(json.dumps(HOSTILE, ensure_ascii=False))) == HOSTILE


def test_the_unsafe_characters_are_those_a_terminal_acts_on():
    # The rule's written-out class against Unicode's own categories, every code point.
    acting = {"Cc", "Cs", "Zl", "Zp"}
    for point in range(0x110000):
        char = chr(point)
        expected = char in BIDI_CONTROLS or unicodedata.category(char) in acting
        assert is_unsafe(char) == expected, hex(point)
    assert terminal_text("a\tb\nc", newlines=True, tabs=True) == "a\tb\nc"
    assert terminal_text("a\tb\nc", newlines=True) == "a\\u0009b\nc"
    assert terminal_text("a\tb\nc") == "a\\u0009b\\u000ac"


def test_an_error_naming_stored_text_is_escaped_too():
    err = io.StringIO()
    with pytest.raises(SystemExit):
        from runs.management.commands.runs import Command

        Command(stderr=err).run_from_argv(["manage.py", "runs", "status", "\x1b[2Jdead"])
    assert _unsafe(err.getvalue()) == []


def test_a_hostile_step_error_is_escaped_in_the_log_a_worker_writes(worker):
    # The console handler as the settings configure it (LOGGING, on the root logger),
    # writing to a buffer.
    [handler] = [h for h in logging.getLogger().handlers if h.name == "console"]
    assert isinstance(handler, logging.StreamHandler)
    stream = io.StringIO()
    # Swapped without setStream: that flushes the old stream, which pytest's capture of an
    # earlier test may have closed already.
    previous, handler.stream = handler.stream, stream
    try:
        run = start_run(
            "faulty", thread_id="hostile-log", input={"case": "hostile_error", "text": HOSTILE}
        )
        executor.execute_step(Step.objects.get(run=run, name="produce").pk, worker)
        # A library's logger goes through the same handler, escaped the same way.
        logging.getLogger("some.library").warning("quoting %s", HOSTILE)
    finally:
        handler.stream = previous
    logged = stream.getvalue()
    assert "step produce raised" in logged and "Traceback" in logged, logged
    assert f"RuntimeError: {terminal_text(HOSTILE)}" in logged
    assert f"WARNING some.library quoting {terminal_text(HOSTILE)}" in logged
    # One line per record: the agentops record is not written a second time by the root.
    assert logged.count("step produce raised") == 1
    assert _unsafe(logged) == []
    # The record's own line cannot be split: a newline in a message is escaped.
    record = logging.LogRecord("agentops.x", logging.WARNING, "", 0, "a %s", ("b\nFORGED",), None)
    assert handler.format(record).endswith("WARNING agentops.x a b\\u000aFORGED")
