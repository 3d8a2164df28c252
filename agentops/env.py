"""Strict readers for settings that come from the environment.

A malformed value is an ``ImproperlyConfigured`` error at start-up rather than a
surprise later (the habit of healthchecks' ``settings.py``). Any variable may instead
be given as ``NAME_FILE``, a path whose contents are the value (for secrets).
"""

import json
import math
import os
from typing import overload

from django.core.exceptions import ImproperlyConfigured

from runs.engine.names import name_problem

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: None = None) -> str | None: ...
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
    """Return a boolean; raises ``ImproperlyConfigured`` for anything but
    1/0/true/false/yes/no/on/off."""
    raw = env_str(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false)")


def env_number(
    name: str, default: float, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    """Return a number (int when integral); raises ``ImproperlyConfigured`` if not a number
    or outside ``minimum``..``maximum``."""
    raw = env_str(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from exc
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a finite number")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be <= {maximum}")
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


#: URL schemes of the databases AgentOps supports (dj-database-url's names).
_DATABASE_SCHEMES = {"postgres", "postgresql", "pgsql", "sqlite"}
_REDIS_SCHEMES = {"redis", "rediss", "unix"}


def env_database_url(name: str, **options) -> dict | None:
    """Return Django's ``DATABASES`` entry for the URL in ``name`` (``None`` when unset).

    ``options`` go to ``dj_database_url.parse`` (``conn_max_age``, ...). Raises
    ``ImproperlyConfigured`` for a URL that does not parse or names a database other than
    PostgreSQL or SQLite."""
    import dj_database_url

    raw = env_str(name)
    if not raw:
        return None
    scheme = raw.split("://", 1)[0] if "://" in raw else ""
    if scheme not in _DATABASE_SCHEMES:
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not a database URL: use postgres://USER:PASSWORD@HOST:PORT/NAME"
            " or sqlite:///PATH"
        )
    try:
        return dict(dj_database_url.parse(raw, **options))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} does not parse: {exc}") from None


def env_redis_url(name: str) -> str | None:
    """Return the Redis URL in ``name`` (``None`` when unset); raises
    ``ImproperlyConfigured`` for one redis-py cannot use (scheme, port, database number)."""
    from redis.connection import parse_url

    raw = env_str(name)
    if not raw:
        return None
    try:
        parsed = parse_url(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not a Redis URL ({exc}); e.g. redis://127.0.0.1:6379/0"
        ) from None
    path = raw.split("://", 1)[1].split("?", 1)[0]
    if raw.startswith(("redis://", "rediss://")) and "/" in path:
        db = path.split("/", 1)[1]
        if db and not db.isdigit():
            raise ImproperlyConfigured(
                f"{name}={raw!r}: the database number {db!r} is not an integer"
            )
    if not parsed.get("host") and not parsed.get("path"):
        raise ImproperlyConfigured(f"{name}={raw!r} names no host")
    return raw


def env_choice(name: str, default: str, choices: list[str]) -> str:
    """Return one of ``choices`` (compared case-insensitively, returned as listed);
    raises ``ImproperlyConfigured`` naming the valid values otherwise."""
    raw = env_str(name)
    if raw is None:
        return default
    for choice in choices:
        if raw.strip().lower() == choice.lower():
            return choice
    raise ImproperlyConfigured(f"{name}={raw!r} is not one of {', '.join(choices)}")


def env_dotted_path(name: str, default: str) -> str:
    """Return a dotted import path (``package.module.attribute``); raises
    ``ImproperlyConfigured`` when it is not one (importing it waits for app loading)."""
    raw = env_str(name, default) or ""
    parts = raw.split(".")
    if len(parts) < 2 or not all(p.isidentifier() for p in parts):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a dotted path like package.module.name")
    return raw


def signal_hooks(hooks: dict) -> dict:
    """``AGENTOPS_SIGNAL_HOOKS`` checked: each name maps to an object with non-empty
    ``secret``, ``signal`` and ``field`` texts, ``by`` ``"thread"`` (default) or ``"run"``,
    and optional ``payload_field`` / ``request_id_field`` texts. Returns the hooks with
    ``by`` filled in; raises ``ImproperlyConfigured`` naming the hook and key."""
    checked = {}
    for name, config in hooks.items():
        where = f"AGENTOPS_SIGNAL_HOOKS[{name!r}]"
        reason = name_problem(name)
        if reason is not None:
            raise ImproperlyConfigured(f"{where}: a hook name {reason}")
        if not isinstance(config, dict):
            raise ImproperlyConfigured(f"{where} must be an object")
        for key in ("secret", "signal", "field"):
            if not isinstance(config.get(key), str) or not config[key].strip():
                raise ImproperlyConfigured(f"{where}.{key} must be non-empty text")
        for key in ("payload_field", "request_id_field"):
            if key in config and (not isinstance(config[key], str) or not config[key].strip()):
                raise ImproperlyConfigured(f"{where}.{key} must be non-empty text")
        unknown = set(config) - {
            "secret",
            "signal",
            "field",
            "by",
            "payload_field",
            "request_id_field",
        }
        if unknown:
            raise ImproperlyConfigured(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
        by = config.get("by", "thread")
        if by not in ("thread", "run"):
            raise ImproperlyConfigured(f"{where}.by must be thread or run")
        checked[name] = {**config, "by": by}
    return checked


#: Keys of one ``AGENTOPS_RATE_LIMITS`` entry.
_RATE_KEYS = {"requests", "tokens", "window_seconds", "requests_per_minute", "tokens_per_minute"}


def env_rate_limits(name: str) -> dict[str, dict]:
    """The named rate limits in ``name`` (JSON: ``{"openai": {"requests_per_minute": 500,
    "tokens_per_minute": 200000}}``, or ``requests`` / ``tokens`` per
    ``window_seconds``), as ``{limit: {"requests": int | None, "tokens": int | None,
    "window_seconds": float}}``. Raises ``ImproperlyConfigured`` naming the setting and
    the limit for an unknown key, a count that is not a positive integer, a window that
    is not a positive number of seconds (at most a day), per-minute counts mixed with a
    window, or a limit with neither count."""
    raw = env_json(name, {})
    limits = {}
    for limit, spec in raw.items():
        where = f"{name}[{limit!r}]"
        if not limit.strip() or len(limit) > 100 or not isinstance(spec, dict):
            raise ImproperlyConfigured(
                f"{where} must be an object under a name of 1..100 characters"
            )
        unknown = set(spec) - _RATE_KEYS
        if unknown:
            raise ImproperlyConfigured(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
        per_minute = {"requests_per_minute", "tokens_per_minute"} & set(spec)
        if per_minute and ({"requests", "tokens", "window_seconds"} & set(spec)):
            raise ImproperlyConfigured(f"{where} mixes per-minute counts with a window")
        window = 60.0 if per_minute else spec.get("window_seconds", 60)
        if (
            isinstance(window, bool)
            or not isinstance(window, int | float)
            or not 0 < window <= 86400
        ):
            raise ImproperlyConfigured(
                f"{where}: window_seconds must be seconds above 0, at most 86400"
            )
        counts = {}
        for key in ("requests", "tokens"):
            value = spec.get(f"{key}_per_minute", spec.get(key))
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ImproperlyConfigured(f"{where}: {key} must be an integer >= 1")
            counts[key] = value
        if counts["requests"] is None and counts["tokens"] is None:
            raise ImproperlyConfigured(f"{where} limits neither requests nor tokens")
        limits[limit] = {**counts, "window_seconds": float(window)}
    return limits
