"""Health endpoints for supervisors and load balancers; no login, no session, no CSRF.

- ``GET /healthz``: the process is alive and serving (200, ``{"status": "ok"}``); it
  touches nothing else, so a database outage never gets the web server restarted.
- ``GET /readyz``: the process can do its work: the database answers ``SELECT 1`` and,
  when ``REDIS_URL`` is configured, Redis answers PING. 200 with
  ``{"status": "ok", "checks": {"database": "ok", "redis": "ok"}}``, else 503 with
  ``"status": "unavailable"`` and, per failed check, the error class and message
  (``redis`` is ``"not configured"`` without ``REDIS_URL``).
"""

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

#: Seconds a Redis check may take before it counts as failed.
REDIS_TIMEOUT = 2.0


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: always 200 while the process serves requests."""
    return JsonResponse({"status": "ok"})


def _check_database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        # Drop the broken connection so the next request connects afresh.
        connection.close_if_unusable_or_obsolete()
        return f"{type(exc).__name__}: {exc}".strip()
    return "ok"


def _check_redis() -> str:
    if not settings.REDIS_URL:
        return "not configured"
    import redis

    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT
    )
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return "ok"


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when the database (and Redis, if configured) answer, else 503."""
    checks = {"database": _check_database(), "redis": _check_redis()}
    ready = all(result in ("ok", "not configured") for result in checks.values())
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks},
        status=200 if ready else 503,
    )
