"""Code that knows ``versioned@3`` (no migrations)."""

from agentops.authoring import register
from tests.workflows.versioned import build

register(build(3))
