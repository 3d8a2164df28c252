"""Strict readers for settings that come from the environment.

A malformed value is an ``ImproperlyConfigured`` error at start-up rather than a
surprise later (the habit of healthchecks' ``settings.py``). Any variable may instead
be given as ``NAME_FILE``, a path whose contents are the value (for secrets).
"""

import json
import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    """Return the variable ``name`` (or the contents of ``NAME_FILE``), else ``default``."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    """Return a boolean; raises ``ImproperlyConfigured`` for anything but 1/0/true/false/yes/no/on/off."""
    raw = env_str(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false)")


def env_number(name: str, default: float, *, minimum: float | None = None) -> float:
    """Return a number (int when integral); raises ``ImproperlyConfigured`` if not a number
    or below ``minimum``."""
    raw = env_str(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be >= {minimum}")
    return int(value) if value.is_integer() else value


def env_json(name: str, default):
    """Return the variable parsed as JSON; raises ``ImproperlyConfigured`` if it is not
    JSON or not of the default's type (an object for a dict default)."""
    raw = env_str(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}") from exc
    if not isinstance(value, type(default)):
        raise ImproperlyConfigured(f"{name} must be a JSON {type(default).__name__}")
    return value
