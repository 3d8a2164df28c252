"""Code that knows ``versioned@3`` (no migrations)."""

from runs.workflows import registry
from tests.workflows.versioned import build

registry.register(build(3))
