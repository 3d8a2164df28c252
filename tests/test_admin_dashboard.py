"""django-rq's admin dashboard: shown when RQ dispatch is configured, absent (never a
500) when dispatch runs from the database."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User

REPO_ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = "/admin/django_rq/dashboard/"


@pytest.mark.django_db
def test_it_never_answers_500_for_the_rq_dashboard(client):
    admin = User.objects.create_superuser("root", password="pw-for-tests")
    client.force_login(admin)
    index = client.get("/admin/")
    response = client.get(DASHBOARD)
    if settings.REDIS_URL:  # make test: a real Redis behind RQ dispatch
        assert response.status_code == 200
        assert DASHBOARD in index.content.decode()
    else:
        assert response.status_code == 404
        assert DASHBOARD not in index.content.decode()


def test_it_does_not_register_the_dashboard_without_redis_url():
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    code = (
        "from django.contrib import admin; from django_rq.models import Dashboard; "
        "print(admin.site.is_registered(Dashboard))"
    )
    proc = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"
