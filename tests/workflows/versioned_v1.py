"""Code that knows ``versioned@1`` (no migrations)."""

from runs.workflows import registry
from tests.workflows.versioned import build

registry.register(build(1))
