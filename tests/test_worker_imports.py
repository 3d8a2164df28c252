"""What a worker process imports at start-up: nothing it does not need to run steps.
The Pydantic AI example agent is declared lazily and imported on first use."""

import os
import subprocess
import sys

SCRIPT = """
import sys
import django
django.setup()
from django.core.management import load_command_class
load_command_class("runs", "worker")
from runs.workflows import registry
assert "support_agent" in registry.names(), registry.names()
assert "support_agent@1" not in registry.loaded_keys()
print(",".join(sorted(m for m in ("pydantic_ai", "openai", "anthropic", "httpx", "rich")
                      if m in sys.modules)))
registry.get("support_agent", 1)
print("pydantic_ai" in sys.modules and "support_agent@1" in registry.loaded_keys())
"""


def test_it_starts_a_worker_without_pydantic_ai_and_loads_the_agent_on_first_use():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "agentops.settings"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["", "True"]
