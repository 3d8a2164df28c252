"""A Redis client for one RQ round of a worker that gives up on Redis at the first sign
of a dead link.

Each Redis call is bounded (``AGENTOPS_REDIS_TIMEOUT``), but after a job RQ makes
several in a row (its job heartbeat, the job's result and registries, then its own
teardown): against a cut link each would wait out the bound in turn while due steps
wait in the database. On this client, once one call timed out or lost its connection,
every later call fails at once with ``redis.TimeoutError``, so RQ's work loop ends and
the worker turns to database polling right away. A new round gets a new client.
"""

import threading


def fail_fast_client(client):
    """A new client on the same server and options as the redis-py ``client``, whose
    calls all fail at once (``redis.TimeoutError`` naming the first failure) after one
    of them timed out or lost its connection. Thread-safe; the trip is per client."""
    import redis

    pool = client.connection_pool
    tripped: list[str] = []
    lock = threading.Lock()
    base = pool.connection_class

    def guarded(method):
        def call(self, *args, **kwargs):
            if tripped:
                raise redis.TimeoutError(f"Redis link given up after: {tripped[0]}")
            try:
                return method(self, *args, **kwargs)
            except (redis.TimeoutError, redis.ConnectionError) as exc:
                with lock:
                    if not tripped:
                        tripped.append(f"{type(exc).__name__}: {exc}")
                raise

        return call

    fail_fast = type(
        f"FailFast{base.__name__}",
        (base,),
        {
            name: guarded(getattr(base, name))
            for name in ("connect", "send_packed_command", "read_response")
        },
    )
    fresh = redis.Redis(
        connection_pool=type(pool)(connection_class=fail_fast, **pool.connection_kwargs)
    )
    fresh.agentops_tripped = tripped  # type: ignore[attr-defined]  # read by given_up()
    return fresh


def given_up(client) -> Exception | None:
    """The ``redis.TimeoutError`` a ``fail_fast_client`` now raises on every call (naming
    the first failure), or ``None`` while it has not given up."""
    import redis

    tripped = getattr(client, "agentops_tripped", None)
    return redis.TimeoutError(tripped[0]) if tripped else None
