"""The production settings documented in docs/deploy.md (deploy/agentops.env): Django's
deployment checks find nothing, the lab is left out, secrets come from *_FILE, and the
JSON log option writes one JSON object per line."""

import json
import secrets
import subprocess
import sys

from tests.support.services import MANAGE_PY, REPO_ROOT

ENV_FILE = REPO_ROOT / "deploy" / "agentops.env"


def production_env(tmp_path) -> dict[str, str]:
    """deploy/agentops.env with its paths in ``tmp_path`` and an SQLite database (the
    checks do not need PostgreSQL); the secret key from a file, as documented."""
    env = {"PATH": "/usr/bin:/bin"}
    for line in ENV_FILE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    secret = tmp_path / "secret_key"
    secret.write_text(secrets.token_urlsafe(50) + "\n")
    model_key = tmp_path / "openai_api_key"
    model_key.write_text("unused-no-model-is-called\n")
    var = tmp_path / "var"
    env.update(
        {
            "SECRET_KEY_FILE": str(secret),
            "OPENAI_API_KEY_FILE": str(model_key),
            "AGENTOPS_VAR_DIR": str(var),
            "AGENTOPS_MEDIA_ROOT": str(var / "artifacts"),
            "AGENTOPS_STATIC_ROOT": str(var / "static"),
        }
    )
    del env["DATABASE_URL_FILE"], env["REDIS_URL"]
    return env


def manage(env, *args):
    return subprocess.run(
        [sys.executable, str(MANAGE_PY), *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_it_passes_check_deploy_with_the_documented_production_settings(tmp_path):
    env = production_env(tmp_path)
    proc = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "System check identified no issues" in proc.stdout
    # The production file leaves the lab out: none of its commands is offered.
    listed = manage(env, "help").stdout.split()
    assert "[runs]" in listed and "[lab]" not in listed and "drill" not in listed


def test_it_warns_about_each_setting_the_production_file_sets(tmp_path):
    env = production_env(tmp_path)
    for name in ("DEBUG", "AGENTOPS_HTTPS", "AGENTOPS_HSTS_SECONDS", "SECRET_KEY_FILE"):
        del env[name]
    proc = manage(env, "check", "--deploy")
    for warning in ("W004", "W008", "W009", "W012", "W016"):
        assert f"security.{warning}" in proc.stderr + proc.stdout


def test_it_writes_json_log_lines(tmp_path):
    env = production_env(tmp_path)
    proc = manage(
        env,
        "shell",
        "-c",
        "import logging; logging.getLogger('agentops.test').warning('hello %s', 'world')",
    )
    assert proc.returncode == 0, proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("{")]
    record = json.loads(line)
    assert record["message"] == "hello world"
    assert record["level"] == "WARNING" and record["logger"] == "agentops.test"


def test_it_refuses_an_unknown_log_format(tmp_path):
    env = production_env(tmp_path)
    env["AGENTOPS_LOG_FORMAT"] = "xml"
    proc = manage(env, "check")
    assert proc.returncode != 0
    assert "AGENTOPS_LOG_FORMAT='xml' is not one of plain, json" in proc.stderr


def test_it_stops_at_start_up_without_the_model_key_file(tmp_path):
    env = production_env(tmp_path)
    env["OPENAI_API_KEY_FILE"] = str(tmp_path / "no_such_key")
    proc = manage(env, "check")
    assert proc.returncode != 0
    assert f"OPENAI_API_KEY_FILE='{tmp_path / 'no_such_key'}' cannot be read" in proc.stderr
    assert "Traceback" not in proc.stderr
