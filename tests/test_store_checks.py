"""A store configured so it can lose the product's data is named where an operator
looks: a worker's start-up (Redis evicting keys) and ``check --deploy`` (Redis
``maxmemory-policy``, PostgreSQL ``fsync`` and ``full_page_writes``, SQLite's journal
mode). Real servers configured that way."""

import psycopg
import redis

from tests.support.services import require_services


def _policy(server, policy: str) -> None:
    client = redis.Redis.from_url(server.url())
    try:
        client.config_set("maxmemory-policy", policy)
    finally:
        client.close()


def test_a_worker_and_check_deploy_name_an_evicting_redis_and_the_fix(
    deployment_factory, private_redis
):
    d = deployment_factory("sqlite", {"REDIS_URL": private_redis.url(3)})
    _policy(private_redis, "allkeys-lru")
    worker = d.manage("worker", "--burst", timeout=120, check=True)
    [line] = [line for line in worker.stderr.splitlines() if "maxmemory-policy" in line]
    assert "maxmemory-policy allkeys-lru" in line and "set maxmemory-policy noeviction" in line
    check = d.manage("check", "--deploy")
    output = check.stdout + check.stderr
    assert "agentops.W003" in output and "maxmemory-policy allkeys-lru" in output

    _policy(private_redis, "volatile-ttl")  # evicts too: only keys with a TTL
    assert "agentops.W003" in d.manage("check", "--deploy").stderr

    _policy(private_redis, "noeviction")
    assert "maxmemory-policy" not in d.manage("worker", "--burst", check=True).stderr
    assert "agentops.W003" not in d.manage("check", "--deploy").stderr


def test_check_deploy_names_a_postgresql_server_that_can_lose_commits(deployment_factory):
    require_services()
    d = deployment_factory("postgres")
    with psycopg.connect(d.database_url) as conn:
        fsync, pages = (
            conn.execute(f"SHOW {name}").fetchone()[0] for name in ("fsync", "full_page_writes")
        )
    # The suite's own server is that server (scripts/with_services.py --no-fsync).
    assert (fsync, pages) == ("off", "off")
    check = d.manage("check", "--deploy")
    output = check.stdout + check.stderr
    assert "agentops.W004" in output and "fsync=off" in output
    assert "agentops.W005" in output and "full_page_writes=off" in output
    # migrate's database check stays about the connection: silent here.
    quiet = d.manage("check", "--database", "default", check=True)
    assert "agentops.W00" not in quiet.stdout + quiet.stderr


def test_check_names_an_sqlite_database_without_wal(deployment_factory):
    d = deployment_factory("sqlite", {"DATABASE_URL": "sqlite:///:memory:"})
    check = d.manage("check", "--database", "default")
    output = check.stdout + check.stderr
    assert "agentops.W006" in output and "journal_mode=memory" in output
