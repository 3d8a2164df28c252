"""A malformed setting stops every command at start-up: one line naming the setting and
what is wrong, exit code 2, no traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

MANAGE_PY = Path(__file__).resolve().parent.parent / "manage.py"

BAD = [
    ("DATABASE_URL", "notaurl", "not a database URL"),
    ("DATABASE_URL", "mysql://u@h/db", "not a database URL"),
    ("DATABASE_URL", "postgres://u@h:notaport/db", "does not parse"),
    ("DATABASE_URL", "sqlite:///nonexistent/dir/x.db", "directory nonexistent/dir does not"),
    ("REDIS_URL", "foo", "not a Redis URL"),
    ("REDIS_URL", "redis://127.0.0.1:notaport/0", "not a Redis URL"),
    ("REDIS_URL", "redis://127.0.0.1:6379/zero", "not an integer"),
    ("AGENTOPS_LEASE_SECONDS", "abc", "not a number"),
    ("AGENTOPS_LEASE_SECONDS", "0", "must be >= 1"),
    ("AGENTOPS_POLL_SECONDS", "nan", "not a finite number"),
    ("DEBUG", "maybe", "not a boolean"),
    ("AGENTOPS_LOG_LEVEL", "LOUD", "not one of"),
    ("AGENTOPS_TOKEN_COUNTER", "count", "not a dotted path"),
    ("AGENTOPS_TOKEN_COUNTER", "os.path.nope", "AGENTOPS_TOKEN_COUNTER"),
    ("AGENTOPS_EXTRA_WORKFLOW_MODULES", "no_such.module", "cannot import"),
    ("SECRET_KEY_FILE", "/nonexistent/secret", "cannot be read"),
    ("AGENTOPS_RATE_LIMITS", '{"openai": {"requests_per_minute": 0}}', "integer >= 1"),
    ("AGENTOPS_RATE_LIMITS", '{"openai": {"rpm": 5}}', "unknown keys: rpm"),
]


def _manage(tmp_path, *args, **env):
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    base.update(AGENTOPS_VAR_DIR=str(tmp_path), **env)
    return subprocess.run(
        [sys.executable, str(MANAGE_PY), *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(("name", "value", "what"), BAD)
@pytest.mark.parametrize("command", [("check",), ("worker", "--burst")])
def test_it_stops_with_one_line_naming_the_setting(tmp_path, command, name, value, what):
    proc = _manage(tmp_path, *command, **{name: value})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert name.removesuffix("_FILE") in lines[0] and what in lines[0]
    assert proc.stdout == ""


def test_it_starts_with_good_urls(tmp_path):
    proc = _manage(
        tmp_path,
        "check",
        DATABASE_URL=f"sqlite:///{tmp_path}/x.sqlite3",
        REDIS_URL="redis://127.0.0.1:6379/3",
    )
    assert proc.returncode == 0, proc.stderr
