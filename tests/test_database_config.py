"""Database connection settings every process gets, whatever names the database."""

import json
import os

import pytest

from tests.support.services import shell_output

PROBE = """
import json
from django.db import connection
with connection.cursor() as c:
    c.execute("PRAGMA journal_mode")
    journal = c.fetchone()[0]
    c.execute("PRAGMA busy_timeout")
    busy = c.fetchone()[0]
print(json.dumps({"journal": journal, "busy_ms": busy,
                  "mode": connection.transaction_mode}))
"""


def _probe(env_overrides: dict[str, str | None]) -> dict:
    env = dict(os.environ)
    for name, value in env_overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return json.loads(shell_output(PROBE, env))


@pytest.mark.parametrize("named_in_url", [True, False], ids=["database_url", "embedded"])
def test_it_configures_every_sqlite_database_the_same(tmp_path, named_in_url):
    path = tmp_path / "agentops.sqlite3"
    if named_in_url:
        env = {"DATABASE_URL": f"sqlite:///{path}", "AGENTOPS_SQLITE_PATH": None}
    else:
        env = {"DATABASE_URL": None, "AGENTOPS_SQLITE_PATH": str(path)}
    assert _probe(env) == {"journal": "wal", "busy_ms": 30000, "mode": "IMMEDIATE"}
