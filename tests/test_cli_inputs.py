"""Bad command-line input ends in one clear line and a non-zero exit, never a traceback,
and writes nothing: numbers out of range, text that is not UTF-8 (or decodes to a lone
surrogate), a SQLite path that cannot be opened, and stdout's reader going away."""

import argparse
import os
import signal
import subprocess
from datetime import UTC, datetime

import pytest
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError

from apitokens.models import ApiToken
from runs.cli import arguments
from runs.models import Run, Thread
from tests.support.command_line import every_action
from tests.support.deployment_runs import db_rows

HUGE = "99999999999999999999"
NOT_UTF8 = os.fsdecode(b"\xff\xfe")


def test_every_number_argument_of_every_command_is_bounded():
    unbounded = [
        f"{path} {action.dest}" for path, action in every_action() if action.type in (int, float)
    ]
    assert unbounded == []


@pytest.mark.parametrize(
    ("make", "text", "value"),
    [
        (lambda: arguments.integer(), "7", 7),
        (lambda: arguments.integer(1, 500), "500", 500),
        (lambda: arguments.number(), "0.5", 0.5),
        (lambda: arguments.number(), "1e3", 1000.0),
    ],
)
def test_a_bounded_type_takes_what_is_in_range(make, text, value):
    assert make()(text) == value


@pytest.mark.parametrize(
    ("make", "text", "why"),
    [
        (lambda: arguments.integer(), HUGE, "not between 0 and 2147483647"),
        (lambda: arguments.integer(), "-1", "not between 0"),
        (lambda: arguments.integer(), "1.5", "not a whole number"),
        (lambda: arguments.number(), "inf", "not between"),
        (lambda: arguments.number(), "nan", "not between"),
        (lambda: arguments.number(), "x", "not a number"),
        (lambda: arguments.number(0, arguments.MAX_DAYS), HUGE, "not between 0 and 365000"),
        (lambda: arguments.port, "99999", "not between 1 and 65535"),
        (lambda: arguments.port, "-1", "not between 1 and 65535"),
    ],
)
def test_a_bounded_type_refuses_what_is_not(make, text, why):
    with pytest.raises(argparse.ArgumentTypeError, match=why):
        make()(text)


def test_an_iso_time_comes_back_in_utc_or_is_refused():
    assert arguments.iso_time("2026-11-30") == datetime(2026, 11, 30, tzinfo=UTC)
    assert arguments.iso_time("2026-11-30T12:00:00+02:00") == datetime(2026, 11, 30, 10, tzinfo=UTC)
    for bad, why in (
        ("9999-12-31T23:59:59-14:00", "outside the years 1 to 9999"),
        ("0001-01-01T00:00:00+14:00", "outside the years 1 to 9999"),
        ("99999-99-99", "not an ISO time"),
        ("yesterday", "not an ISO time"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            arguments.iso_time(bad)


def test_text_with_undecodable_bytes_surrogates_or_nul_is_refused():
    assert arguments.check_text("café", "--q") == "café"
    for bad, why in ((NOT_UTF8, "not valid UTF-8"), ("\ud800", "not valid UTF-8"), ("a\0", "NUL")):
        with pytest.raises(CommandError, match=f"--q .*{why}.*invalid_input"):
            arguments.check_text(bad, "--q")


@pytest.mark.django_db
def test_json_that_decodes_to_a_lone_surrogate_is_refused_and_no_run_is_written():
    with pytest.raises(CommandError, match=r"--input: at \$\.question: .*surrogate"):
        call_command(
            "runs", "start", "room_temperature", "--thread", "S", "--input",
            '{"question":"\\ud800"}',
        )  # fmt: skip
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_a_blank_token_name_is_refused():
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("alice")
    for blank in ("", "   "):
        with pytest.raises(CommandError, match="token name must be non-empty.*invalid_input"):
            call_command("api_token", "create", "alice", "--name", blank)
    assert ApiToken.objects.count() == 0
    call_command("api_token", "create", "alice", "--name", " ci ")
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["ci"]


@pytest.mark.django_db
def test_a_token_listing_says_when_a_user_has_none():
    from io import StringIO

    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("bob")
    out = StringIO()
    call_command("api_token", "list", "bob", stdout=out)
    assert out.getvalue() == "no tokens\n"


#: (argv, exit status, the one line on stderr must contain)
REFUSED = [
    (("runs", "start", "room_temperature", "--thread", NOT_UTF8, "--input", "{}"), 2,
     "manage.py runs: error: the value of --thread is not valid UTF-8 text: b'\\xff\\xfe' "
     "[invalid_thread] (see manage.py runs --help)"),
    (("runs", "start", "room_temperature", "--thread", "T", "--input",
      '{"question":"' + NOT_UTF8 + '"}'), 2, "the value of --input is not valid UTF-8"),
    (("runs", "start", "room_temperature", "--thread", "T", "--input",
      '{"question":"\\ud800"}'), 2,
     "argument --input: at $.question: text holds a lone surrogate [invalid_input]"),
    (("runs", "list", "--q", os.fsdecode(b"\xff")), 2, "the value of --q is not valid UTF-8"),
    (("runs", "list", "--offset", HUGE), 2, "argument --offset: 99999999999999999999 is not"),
    (("runs", "list", "--limit", "0"), 2, "argument --limit: 0 is not between 1 and 500"),
    (("prune", "--older-than", HUGE, "--dry-run"), 2, "argument --older-than: 9999"),
    (("prune", "--older-than", "-1", "--dry-run"), 2, "argument --older-than: -1 is not"),
    (("serve", "--port", "99999"), 2, "argument --port: 99999 is not between 1 and 65535"),
    (("serve", "--port", "-1"), 2, "argument --port: -1 is not between 1 and 65535"),
    # An id past the largest names no takeover, as on the console.
    (("approvals", "resolve", HUGE, "cancel", "--reason", "r"), 1,
     f"no takeover {HUGE} [unknown_takeover]"),
    (("runs", "replay", "--status", "FAILED", "--from-failed-step", "--reason", "x",
      "--since", "9999-12-31T23:59:59-14:00"), 2, "argument --since: 9999-12-31T23:59:59-14:00"),
    (("backup", ""), 2, "manage.py backup: error: argument dest: the path must not be empty "
     "(see manage.py backup --help)"),
    (("backup", "/tmp"), 2, "argument dest: /tmp is a directory; name a file in it"),
    (("backup", "/nonexistent/dir/x.tar"), 2, "directory /nonexistent/dir does not exist"),
    (("restore", ""), 2, "argument src: the path must not be empty"),
    (("restore", "/tmp"), 2, "argument src: /tmp is a directory, not a file"),
    (("restore", "/nonexistent/x.tar"), 2, "argument src: /nonexistent/x.tar does not exist"),
    (("bench", "--json", "/tmp"), 2, "argument --json: /tmp is a directory"),
    (("soak", "--json", ""), 2, "argument --json: the path must not be empty"),
    (("runs", "message", "--thread", "", "hi"), 2,
     "argument --thread: thread id must be non-empty text (1..200 characters) [invalid_thread]"),
    (("runs", "message", "--thread", "x" * 201, "hi"), 2,
     "thread id must be at most 200 characters (1..200 characters) [invalid_thread]"),
    (("runs", "start", "room_temperature", "--thread", " ", "--input", "{}"), 2,
     "[invalid_thread]"),
    (("runs", "policy", "--thread", "x" * 201, "interrupt"), 2, "[invalid_thread]"),
    (("runs", "policy", "--thread", ""), 2, "[invalid_thread]"),
    (("runs", "status", "--thread", ""), 2, "[invalid_thread]"),
    (("runs", "resume", "--thread", "x" * 201), 2, "[invalid_thread]"),
    (("runs", "context", "--thread", ""), 2, "[invalid_thread]"),
    (("runs", "list", "--thread", ""), 2, "[invalid_thread]"),
    (("demo", "--thread", ""), 2, "[invalid_thread]"),
    (("setup_roles", "--user", "x" * 151, "--role", "viewer"), 2,
     "argument --user: Ensure this value has at most 150 characters (it has 151)."),
    (("setup_roles", "--user", "bad user!", "--role", "viewer"), 2,
     "argument --user: Enter a valid username."),
    (("setup_roles", "--user", "", "--role", "viewer"), 2,
     "argument --user: This field cannot be blank."),
    (("setup_roles", "--role", "viewer"), 1, "--user and --role go together"),
    (("runs", "start", "dim_lights", "--thread", "T", "--crash-after-tool", "nosuch"), 1,
     "--crash-after-tool: dim_lights calls no tool 'nosuch'; tools: get_brightness, "
     "lamp.get_brightness, lamp.set_brightness, set_brightness [unknown_tool]"),
    (("runs", "start", "support_agent", "--thread", "T", "--hang-after-tool", "nosuch"), 1,
     "--hang-after-tool: support_agent calls no tool 'nosuch'; tools: issue_refund, "
     "lookup_order [unknown_tool]"),
    (("runs", "start", "room_temperature", "--thread", "T", "--lamp-unreadable"), 1,
     "--lamp-unreadable: room_temperature does not call the simulated lamp [no_lamp]"),
    (("runs", "start", "room_temperature", "--thread", "T", "--crash-before", "nosuch"), 1,
     "room_temperature has no step 'nosuch'"),
    (("api_token", "create", "nosuch", "--name", "x" * 101), 2,
     "argument --name: token name must be at most 100 characters"),
    (("api_token", "list", "nosuch"), 1, "no user 'nosuch' [unknown_user]; users: none"),
    (("approvals", "list", "--run", ""), 2, "argument --run: must not be empty"),
    (("runs", "replay", "--status", "FAILED", "--from-failed-step", "--reason", "x",
      "--error-code", ""), 2, "argument --error-code: must not be empty"),
    (("runs", "replay", "00000000-0000-0000-0000-000000000000", "--as", ""), 2,
     "argument --as: must not be empty"),
    (("runs", "resume", "--thread", "T", "--from", ""), 2,
     "argument --from: checkpoint name must be non-empty text"),
    (("runs", "list", "--owner", ""), 2, "argument --owner: must not be empty"),
    (("runs", "list", "--q", " "), 2, "argument --q: must not be empty"),
    (("worker", "--queue", " "), 2, "argument --queue: must not be empty"),
    (("serve", "--host", ""), 2, "argument --host: must not be empty"),
    (("api_token", "revoke", ""), 2, "argument prefix: must not be empty"),
    (("api_token", "revoke", "a"), 1,
     "CommandError: no active token with prefix 'a' [unknown_token]; active prefixes: none"),
    (("api_token", "create", " "), 2, "argument username: must not be empty"),
    (("api_token", "list", ""), 2, "argument username: must not be empty"),
    (("runs", "budget", "00000000-0000-0000-0000-000000000000", "--add-tokens", "1",
      "--as", ""), 2, "argument --as: must not be empty"),
    (("runs", "resolve", "00000000-0000-0000-0000-000000000000", "--step", "s", "--outcome",
      "done", "--evidence", "e", "--as", ""), 2, "argument --as: must not be empty"),
    (("artifacts", "check", "--as", " "), 2, "argument --as: must not be empty"),
    (("approvals", "decide", "1", "approve", "--as", ""), 2, "argument --as: must not be empty"),
    (("approvals", "claim", "1", "--as", ""), 2, "argument --as: must not be empty"),
    (("approvals", "resolve", "1", "cancel", "--reason", "r", "--as", ""), 2,
     "argument --as: must not be empty"),
    (("approvals", "resolve", "1", "resume", "--reason", "r", "--checkpoint", ""), 2,
     "argument --checkpoint: checkpoint name must be non-empty text"),
    (("runs", "start", "room_temperature", "--thread", "T", "--crash-before", ""), 2,
     "argument --crash-before: must not be empty"),
    (("runs", "start", "dim_lights", "--thread", "T", "--crash-after-tool", ""), 2,
     "argument --crash-after-tool: must not be empty"),
    (("runs", "start", "dim_lights", "--thread", "T", "--hang-after-tool", " "), 2,
     "argument --hang-after-tool: must not be empty"),
    (("runs", "context", "--thread", "T", "--step", ""), 2, "argument --step: must not be empty"),
    (("runs", "message", "--thread", "T", "hi", "--request-id", ""), 2,
     "argument --request-id: idempotency key must be non-empty text"),
    (("runs", "message", "--thread", "T", "hi", "--workflow", ""), 2,
     "argument --workflow: workflow name must be non-empty text [invalid_input]"),
    (("runs", "list", "--created-after", ""), 2, "argument --created-after: must not be empty"),
    (("runs", "list", "--updated-before", " "), 2,
     "argument --updated-before: must not be empty"),
    (("workflows", ""), 2, "argument name: must not be empty"),
    (("schedules", "add", "ctl\x01name", "--workflow", "bench_noop", "--every", "60"), 2,
     "argument name: schedule name must be 1..100 characters of letters, digits"),
    (("schedules", "add", "new\nline", "--workflow", "bench_noop", "--every", "60"), 2,
     "argument name: schedule name must be 1..100 characters"),
    (("schedules", "add", "a/b?c", "--workflow", "bench_noop", "--every", "60"), 2,
     "argument name: schedule name must be 1..100 characters"),
    (("schedules", "add", "", "--workflow", "bench_noop", "--every", "60"), 2,
     "argument name: schedule name must be non-empty text [invalid_input]"),
    (("schedules", "pause", "a/b"), 2, "argument name: schedule name must be 1..100 characters"),
    (("schedules", "add", "s", "--workflow", "bench_noop", "--every", "315360001"), 2,
     "argument --every: 315360001 is not between 1 and 315360000"),
    (("schedules", "add", "s", "--workflow", "bench_noop", "--every", "60",
      "--catchup-window", "999999999999"), 2,
     "argument --catchup-window: 999999999999 is not between 1 and 315360000"),
    (("schedules", "add", "s", "--workflow", "bench_noop", "--cron", "0 9 * * 1", "--tz", ""),
     2, "argument --tz: must not be empty"),
    (("schedules", "add", "ovf", "--workflow", "order_followup", "--every", "60", "--input",
      '{"order": "o", "delay_s": 99999999999999999999999}'), 1,
     "CommandError: input is not valid for order_followup [invalid_input]; input.delay_s: "
     "must be from 0 to 315360000"),
    (("runs", "signal", "00000000-0000-0000-0000-000000000000", "a b"), 2,
     "argument name: signal name must be 1..100 characters"),
    (("runs", "status", "--", "----"), 1,
     "CommandError: no run '----': a run id or a prefix of one has at least 4 hex digits"),
    (("runs", "status", "----"), 1, "CommandError: no run '----': a run id or a prefix"),
    (("runs", "status", "0"), 1,
     "CommandError: no run '0': a run id or a prefix of one has at least 4 hex digits"),
    (("runs", "status"), 2, "name a run: RUN_ID or --thread THREAD"),
    (("runs", "resume"), 2, "name a run: RUN_ID or --thread THREAD"),
    (("runs", "start", "room_temperature", "--thread", "T", "--input", "{}"), 1,
     "CommandError: input is not valid for room_temperature [invalid_input]; input.question: "
     "is required"),
]  # fmt: skip


@pytest.mark.django_db
def test_bad_arguments_end_in_one_line_and_write_nothing(manage_in_process):
    for argv, status, line in REFUSED:
        code, out, err = manage_in_process(*argv)
        assert code == status, (argv, err)
        assert len(err.splitlines()) == 1, (argv, err)
        assert line in err, (argv, err)
        assert out == "", argv
    assert Run.objects.count() == 0
    assert Thread.objects.count() == 0


#: Rows of ``REFUSED`` of each kind (argv checked before Django, a usage error, a refusal
#: from the engine), run as real processes like a user's.
IN_A_PROCESS = [REFUSED[0], *(row for row in REFUSED if row[0] == ("backup", "")), REFUSED[-1]]


def test_bad_arguments_end_the_same_in_a_process_of_their_own(deployment_factory):
    d = deployment_factory("sqlite")
    for argv, status, line in IN_A_PROCESS:
        proc = d.manage(*argv)
        assert proc.returncode == status, (argv, proc.stderr)
        assert len(proc.stderr.splitlines()) == 1, (argv, proc.stderr)
        assert line in proc.stderr, (argv, proc.stderr)
        assert proc.stdout == "", argv
    assert db_rows(d, "SELECT count(*) FROM runs_run") == [(0,)]
    assert db_rows(d, "SELECT count(*) FROM runs_thread") == [(0,)]


def test_a_usage_error_is_one_line_with_a_hint_not_the_usage_block(deployment_factory):
    d = deployment_factory("sqlite")
    proc = d.manage("runs", "list", "--limit", "0")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "manage.py runs list: error: argument --limit: 0 is not between 1 and 500 "
        "(see manage.py runs list --help)"
    ]


def test_an_unreachable_database_server_is_one_line_for_every_command(deployment_factory):
    d = deployment_factory("sqlite")
    d.env["DATABASE_URL"] = "postgres://u:p@127.0.0.1:1/x"
    for argv in (("runs", "list"), ("workers",), ("approvals", "list")):
        proc = d.manage(*argv)
        assert proc.returncode == 1, (argv, proc.stderr)
        [line] = proc.stderr.splitlines()
        assert line.startswith(
            "database error: DATABASE_URL: cannot connect to the PostgreSQL server at 127.0.0.1:1: "
        ), line


def test_a_file_argument_is_checked_before_any_work(tmp_path):
    target = tmp_path / "a.tar"
    assert arguments.output_file(str(target)) == str(target)
    for bad, why in (("", "must not be empty"), (str(tmp_path), "is a directory"),
                     (str(tmp_path / "no" / "a.tar"), "does not exist")):  # fmt: skip
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            arguments.output_file(bad)
    for bad, why in (("", "must not be empty"), (str(tmp_path), "is a directory"),
                     (str(target), "does not exist")):  # fmt: skip
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            arguments.input_file(bad)


# Committed rows: on PostgreSQL the backup exports a snapshot from a transaction of its
# own, which cannot be opened inside the test's transaction.
@pytest.mark.django_db(transaction=True)
def test_a_backup_that_cannot_be_written_leaves_no_partial_file(tmp_path, monkeypatch):
    import errno

    from runs.engine.data import backup

    for bad, why in (("", "must not be empty"), (tmp_path, "is a directory")):
        with pytest.raises(backup.BackupError, match=why):
            backup.create_backup(bad)

    def disk_full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(backup.os, "replace", disk_full)
    with pytest.raises(backup.BackupError, match="cannot write .*a.tar: No space left on device"):
        backup.create_backup(tmp_path / "a.tar")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.django_db
def test_setup_roles_creates_a_user_django_would_accept():
    from django.contrib.auth import get_user_model

    call_command("setup_roles", "--user", "ops.lead@example", "--role", "viewer")
    user = get_user_model().objects.get()
    assert (user.username, list(user.groups.values_list("name", flat=True))) == (
        "ops.lead@example",
        ["viewer"],
    )


def test_a_tool_fault_can_name_a_tool_by_its_full_or_short_name():
    from lab.fault_flags import tool_names
    from runs.workflows import registry

    assert "set_brightness" in tool_names(registry.get("dim_lights"))
    assert "lamp.set_brightness" in tool_names(registry.get("dim_lights"))
    assert tool_names(registry.get("support_agent")) == ["issue_refund", "lookup_order"]


def test_a_fault_flag_registers_once_by_name():
    from lab.fault_flags import FLAGS
    from runs.engine import hooks

    assert [f.name for f in hooks.fault_flags()] == [f.name for f in FLAGS]
    with pytest.raises(ValueError, match="'crash_before' registered twice"):
        hooks.register_fault(FLAGS[0])


@pytest.mark.django_db
def test_a_thread_policy_refuses_a_thread_id_no_run_could_use():
    from runs.engine.control.lifecycle import ControlError
    from runs.engine.data.inbox import set_policy
    from runs.models import Thread

    for bad in ("", "x" * 201):
        with pytest.raises(ControlError) as caught:
            set_policy(bad, "interrupt")
        assert caught.value.code == "invalid_thread"
    assert Thread.objects.count() == 0


def test_a_sqlite_path_that_cannot_be_opened_is_one_line_at_start_up(deployment_factory):
    d = deployment_factory("sqlite")
    d.env["DATABASE_URL"] = "sqlite:///nonexistent/dir/x.db"
    for argv in (("workers",), ("runs", "list"), ("worker", "--burst")):
        proc = d.manage(*argv)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.splitlines() == [
            "configuration error: DATABASE_URL: cannot open the SQLite database "
            "nonexistent/dir/x.db: directory nonexistent/dir does not exist"
        ]


def test_a_reader_that_goes_away_ends_the_command_quietly_like_a_unix_tool(deployment_factory):
    d = deployment_factory("sqlite")
    d.manage(
        "runs",
        "start",
        "room_temperature",
        "--thread",
        "P",
        "--input",
        '{"question": "warm?"}',
        check=True,
    )
    for argv in (("runs", "status", "--thread", "P"), ("workflows",), ("runs", "list")):
        read_end, write_end = os.pipe()
        # The reader is gone before the command writes its first line.
        os.close(read_end)
        try:
            proc = subprocess.run(
                d.command(*argv), env=d.env, stdout=write_end, stderr=subprocess.PIPE,
                text=True, timeout=120,
            )  # fmt: skip
        finally:
            os.close(write_end)
        assert proc.returncode == -signal.SIGPIPE, (argv, proc.stderr)
        assert proc.stderr == "", argv


@pytest.mark.django_db
def test_runs_budget_refuses_a_limit_the_run_does_not_have_and_prints_json():
    from io import StringIO

    from runs.engine.control.lifecycle import start_run
    from runs.models import Event

    run = start_run(
        "room_temperature", thread_id="B", input={"question": "warm?"}, budget={"model_calls": 1}
    )
    with pytest.raises(CommandError, match=r"no such limit to raise \(--add-cost\).*limit_not_set"):
        call_command(
            "runs", "budget", str(run.pk), "--add-model-calls", "1", "--add-cost", "0.05",
            "--reason", "r",
        )  # fmt: skip
    run.refresh_from_db()
    assert run.budget == {"model_calls": 1}
    assert not Event.objects.filter(run=run, type="budget.raised").exists()
    out = StringIO()
    call_command(
        "runs", "budget", str(run.pk), "--add-model-calls", "1", "--reason", "r", stdout=out
    )
    assert out.getvalue().startswith(
        f'run {run.pk}: budget {{"model_calls": 1}} -> {{"model_calls": 2}}; run is '
    )


@pytest.mark.django_db
def test_runs_budget_takes_the_engines_token_maximum_not_a_32_bit_one():
    from runs.engine.control.lifecycle import start_run

    run = start_run(
        "room_temperature", thread_id="T", input={"question": "warm?"}, budget={"tokens": 100}
    )
    call_command("runs", "budget", str(run.pk), "--add-tokens", "3000000000", "--reason", "r")
    run.refresh_from_db()
    assert run.budget == {"tokens": 3_000_000_100}


def _json_options() -> dict[str, str]:
    """``"COMMAND SUB --option"`` -> the name of the argparse type of every option whose
    help says it takes JSON (not ``--json``, which asks for JSON output)."""
    return {
        f"{path} {action.option_strings[0]}": getattr(action.type, "__name__", "")
        for path, action in every_action()
        if action.option_strings
        and action.option_strings[0] != "--json"
        and "JSON" in (action.help or "")
    }


def test_no_optional_text_option_lets_a_blank_value_mean_left_out():
    """An option that is ``None`` when left out and has no type takes ``--x ''`` (an
    unset shell variable) as ``''``, which a command testing ``if options["x"]`` reads
    as "left out": such an option needs a type that refuses blank text."""
    untyped = [
        f"{path} {action.option_strings[0]}"
        for path, action in every_action()
        if action.option_strings
        and action.nargs != 0
        and not (action.required or action.choices or action.type)
        and action.default is None
    ]
    assert untyped == []


def test_every_json_option_is_parsed_and_checked_as_its_value_is_read():
    assert _json_options() == {
        "runs start --input": "JSON object",
        "runs start --budget": "JSON object",
        "runs resume --input-patch": "JSON object",
        "runs resolve --result": "JSON value",
        "runs deliver --result": "JSON value",
        "approvals decide --arguments": "JSON object",
        "approvals resolve --result": "JSON value",
        "runs signal --payload": "JSON value",
    }


RUN_ID = "00000000-0000-0000-0000-000000000000"
#: Each JSON option: the arguments its command needs besides it, and the code it refuses
#: a bad value with.
JSON_OPTIONS = {
    "--input": (("runs", "start", "room_temperature", "--thread", "T"), "invalid_input"),
    "--budget": (("runs", "start", "room_temperature", "--thread", "T", "--input",
                  '{"question": "a"}'), "invalid_budget"),
    "--input-patch": (("runs", "resume", RUN_ID, "--from", "start", "--reason", "r"),
                      "invalid_input"),
    "--result": (("runs", "resolve", RUN_ID, "--step", "s", "--outcome", "done",
                  "--evidence", "e"), "invalid_input"),
    "--arguments": (("approvals", "decide", "1", "approve", "--as", "u"), "invalid_arguments"),
    "--payload": (("runs", "signal", RUN_ID, "payment"), "invalid_input"),
}  # fmt: skip
#: (value, objects only, what the one line says about it)
BAD_JSON = [
    ("", False, "must not be empty"),
    ("  ", False, "must not be empty"),
    ("null", False, "must not be null (leave the option out instead) [CODE]"),
    ("{", False, "not valid JSON: "),
    ("[]", True, "must be a JSON object {...}, not [] [CODE]"),
    ("5", True, "must be a JSON object {...}, not 5 [CODE]"),
    ('"x"', True, 'must be a JSON object {...}, not "x" [CODE]'),
    (
        "[" * 5000 + "]" * 5000,
        False,
        "not valid JSON: nested deeper than 200 levels [invalid_json]",
    ),
    ('{"x": "a\\u0000"}', False, "at $.x: must not contain NUL (\\u0000) characters [CODE]"),
]


@pytest.mark.django_db
def test_blank_null_or_non_object_json_is_a_usage_error_naming_the_option(manage_in_process):
    for option, (argv, refusal) in JSON_OPTIONS.items():
        for value, objects_only, why in BAD_JSON:
            if objects_only and option in ("--result", "--payload"):
                continue
            code, out, err = manage_in_process(*argv, option, value)
            assert code == 2, (option, value, err)
            [line] = err.splitlines()
            assert f"argument {option}: {why.replace('CODE', refusal)}" in line, (option, line)
            assert out == ""
    code, _, err = manage_in_process(
        "approvals", "resolve", "1", "mark_done", "--reason", "r", "--result", ""
    )
    assert code == 2 and "argument --result: must not be empty" in err
    assert Run.objects.count() == 0
    assert Thread.objects.count() == 0


def test_a_json_result_that_is_falsy_is_kept_not_dropped():
    command = load_command_class(get_commands()["runs"], "runs")
    parser = command.create_parser("manage.py", "runs")
    for text, value in (("0", 0), ("{}", {}), ("false", False), ('""', "")):
        options = parser.parse_args(
            ["resolve", RUN_ID, "--step", "s", "--outcome", "done", "--evidence", "e",
             "--result", text]
        )  # fmt: skip
        assert options.result == value
        assert options.result is not None


def test_an_error_whose_text_spans_lines_is_one_line_on_the_command_line():
    from runs.cli.common import control_error, one_line
    from runs.engine.control.lifecycle import ControlError

    assert one_line("failed:\n- method gz: bad\n\n  - method tar: bad\n") == (
        "failed:; - method gz: bad; - method tar: bad"
    )
    refused = control_error(ControlError("pg_failed", "pg_restore failed:\nline 1\nline 2"))
    assert str(refused) == "pg_restore failed:; line 1; line 2 [pg_failed]"


@pytest.mark.django_db
def test_revoking_an_unknown_token_prefix_names_the_active_ones_and_revokes_nothing():
    from django.contrib.auth import get_user_model

    from apitokens.services import create_token, revoke

    user = get_user_model().objects.create_user("alice")
    kept, _ = create_token(user, "ci")
    gone, _ = create_token(user, "old")
    revoke(gone)
    for unknown in ("a", kept.prefix[:5], gone.prefix):
        with pytest.raises(CommandError) as refused:
            call_command("api_token", "revoke", unknown)
        assert str(refused.value) == (
            f"no active token with prefix {unknown!r} [unknown_token]; active prefixes: "
            f"{kept.prefix} (python manage.py api_token list shows them)"
        )
    assert ApiToken.objects.filter(revoked_at__isnull=True).get() == kept
    twin, _ = create_token(user, "twin")
    ApiToken.objects.filter(pk=twin.pk).update(prefix=kept.prefix)
    with pytest.raises(CommandError, match=r"2 active tokens have prefix .* \[ambiguous_token\]"):
        call_command("api_token", "revoke", kept.prefix)
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    "argv",
    [
        ("schedules", "add", "s", "--workflow", "nosuch", "--every", "60"),
        ("runs", "start", "nosuch", "--thread", "T"),
    ],
)
def test_an_unknown_workflow_lists_the_workflows_once(manage_in_process, argv):
    code, out, err = manage_in_process(*argv)
    assert code == 1 and out == ""
    [line] = err.splitlines()
    assert "[unknown_workflow]" in line and line.count("order_followup") == 1, line
