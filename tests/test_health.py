"""/healthz and /readyz: no login, JSON, and 503 when a dependency does not answer (the
stopped-database case runs in scripts/deploy_smoke.py, against a real server)."""

import socket

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens there once the socket is closed


def test_it_answers_healthz_without_login():
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


def test_it_answers_readyz_when_the_database_answers_and_redis_is_not_configured(settings):
    settings.REDIS_URL = None
    response = Client().get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "checks": {"database": "ok", "redis": "not configured"},
    }


def test_it_checks_redis_when_configured(settings, private_redis):
    settings.REDIS_URL = private_redis.url()
    response = Client().get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "redis": "ok"}


def test_it_answers_503_when_redis_does_not_answer(settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["redis"].startswith("ConnectionError")


def test_it_refuses_other_methods():
    assert Client().post("/healthz").status_code == 405
    assert Client().post("/readyz").status_code == 405


def test_it_does_not_redirect_health_checks_to_https(settings):
    settings.SECURE_SSL_REDIRECT = True
    assert Client().get("/healthz").status_code == 200
    assert Client().get("/readyz").status_code in (200, 503)
    assert Client().get("/accounts/login/").status_code == 301
