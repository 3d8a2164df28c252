"""Every call into a network link is bounded: Redis URLs carry connect and read/write
timeouts (django-rq's clients included), PostgreSQL connections carry libpq keepalives,
``tcp_user_timeout`` and ``connect_timeout``, and the RQ worker's Redis client gives up
on a dead link after its first timeout (``tests/test_partitions.py`` cuts real links)."""

import signal

import pytest
import redis
from django.conf import settings
from django.db import connection

from agentops.links import bounded_redis_url, pg_link_options
from runs.engine.execution import redis_link
from tests.support.services import require_services


def test_every_redis_url_carries_the_timeouts():
    url = bounded_redis_url("redis://h:6379/2?socket_timeout=9", timeout=5, connect_timeout=3)
    assert url == (
        "redis://h:6379/2?socket_timeout=9&socket_connect_timeout=3&socket_keepalive=true"
    )
    client = redis.Redis.from_url(settings.RQ_QUEUES["default"]["URL"])
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == settings.AGENTOPS_REDIS_TIMEOUT
    assert kwargs["socket_connect_timeout"] == settings.AGENTOPS_REDIS_CONNECT_TIMEOUT
    assert kwargs["socket_keepalive"] is True
    assert client.connection_pool.get_connection().retry.get_retries() == 0


def test_libpq_link_options_are_whole_seconds_and_milliseconds():
    assert pg_link_options(keepalive_idle=4.2, user_timeout=10, connect_timeout=2.5) == {
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 1,
        "keepalives_count": 3,
        "tcp_user_timeout": 10000,
        "connect_timeout": 3,
    }


@pytest.mark.django_db
def test_a_postgresql_connection_uses_the_link_bounds():
    require_services()
    connection.ensure_connection()
    params = connection.connection.info.get_parameters()
    assert params["keepalives"] == "1"
    assert params["keepalives_idle"] == "5"
    assert params["tcp_user_timeout"] == "10000"
    assert params["connect_timeout"] == "5"


@pytest.mark.services
def test_a_fail_fast_client_gives_up_on_a_frozen_redis_after_one_timeout(private_redis):
    plain = redis.Redis.from_url(
        bounded_redis_url(private_redis.url(), timeout=1, connect_timeout=1)
    )
    link = redis_link.fail_fast_client(plain)
    assert link.ping() and redis_link.given_up(link) is None
    private_redis.proc.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(redis.TimeoutError):
            link.ping()
        with pytest.raises(redis.TimeoutError, match="Redis link given up after: Timeout"):
            link.set("k", "v")
        assert "Timeout" in str(redis_link.given_up(link))
    finally:
        private_redis.proc.send_signal(signal.SIGCONT)
    # The plain client it was made from is not tripped: the worker probes with it.
    assert plain.ping()
    plain.close()
