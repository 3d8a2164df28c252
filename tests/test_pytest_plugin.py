"""AgentOps's pytest plugin (installed with it): in a project of one's own, outside the
repository and with no Django settings configured, a test that needs the database is
an error naming DJANGO_SETTINGS_MODULE, not pytest-django's quiet skip; a test that
does not need Django passes as before."""

import os
import subprocess
import sys

import pytest

from agentops.pytest_plugin import UNCONFIGURED

TESTS = """
import pytest

@pytest.mark.django_db
def test_needs_the_database():
    pass

def test_needs_the_settings(settings):
    pass

def test_needs_nothing():
    pass
"""


@pytest.mark.timeout(300)
def test_a_test_needing_django_without_settings_is_an_error_naming_the_setting(tmp_path):
    (tmp_path / "test_mine.py").write_text(TESTS, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_mine.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("1 passed, 2 errors"), done.stdout
    assert done.stdout.count("ERROR at setup of test_needs_") == 2
    assert "DJANGO_SETTINGS_MODULE=agentops.settings" in UNCONFIGURED
    assert UNCONFIGURED in done.stdout and "skipped" not in done.stdout
