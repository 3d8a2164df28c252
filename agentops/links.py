"""Bounds on the network links to Redis and PostgreSQL, for settings.

A link that is cut without a reset (a partition: packets vanish) leaves a blocking call
waiting for the operating system's TCP timers, minutes by default. These helpers give
every connection explicit bounds instead, so a call into a dead link fails within
seconds and the caller falls back (RQ to database polling) or retries its transaction.

- ``bounded_redis_url`` adds redis-py's connect and read/write timeouts and TCP
  keepalive to a Redis URL. Every client built from it is bounded, django-rq's included
  (it builds its clients from ``RQ_QUEUES[...]["URL"]``), and redis-py retries nothing
  by itself on a client built from a URL.
- ``pg_link_options`` gives libpq's client-side keepalives, ``tcp_user_timeout`` and
  ``connect_timeout`` for ``DATABASES[...]["OPTIONS"]``.
"""

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

#: Seconds between unanswered keepalive probes, and how many end the connection.
KEEPALIVE_INTERVAL = 1
KEEPALIVE_COUNT = 3


def bounded_redis_url(
    url: str, *, timeout: float | None = None, connect_timeout: float | None = None
) -> str:
    """``url`` with ``socket_timeout`` (read and write) and ``socket_connect_timeout``
    (seconds; ``None``: the ``AGENTOPS_REDIS_TIMEOUT`` / ``AGENTOPS_REDIS_CONNECT_TIMEOUT``
    settings) and ``socket_keepalive`` in its query string. A bound the URL names
    itself is kept: the operator chose it."""
    if timeout is None or connect_timeout is None:
        from django.conf import settings

        timeout = settings.AGENTOPS_REDIS_TIMEOUT if timeout is None else timeout
        if connect_timeout is None:
            connect_timeout = settings.AGENTOPS_REDIS_CONNECT_TIMEOUT
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.setdefault("socket_timeout", f"{timeout:g}")
    query.setdefault("socket_connect_timeout", f"{connect_timeout:g}")
    query.setdefault("socket_keepalive", "true")
    return urlunsplit(parts._replace(query=urlencode(query)))


def pg_link_options(*, keepalive_idle: float, user_timeout: float, connect_timeout: float) -> dict:
    """libpq connection options that bound a call into a dead link, for
    ``DATABASES[...]["OPTIONS"]``.

    After ``keepalive_idle`` seconds without traffic the client probes the server every
    ``KEEPALIVE_INTERVAL`` seconds and drops the connection after ``KEEPALIVE_COUNT``
    unanswered probes (so an idle connection to a vanished server ends within
    ``keepalive_idle + 3`` s); data the server leaves unacknowledged for
    ``user_timeout`` seconds ends it too (``tcp_user_timeout``, which libpq takes in
    milliseconds); a connection attempt gives up after ``connect_timeout`` seconds.
    libpq takes whole seconds for the others: fractions are rounded up.
    """
    return {
        "keepalives": 1,
        "keepalives_idle": _whole(keepalive_idle),
        "keepalives_interval": KEEPALIVE_INTERVAL,
        "keepalives_count": KEEPALIVE_COUNT,
        "tcp_user_timeout": int(user_timeout * 1000),
        "connect_timeout": _whole(connect_timeout),
    }


def _whole(seconds: float) -> int:
    return max(1, int(-(-seconds // 1)))
