"""django-rq's admin dashboard: shown when RQ dispatch is configured, absent (never a
500) when dispatch runs from the database."""

import os

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from tests.support.services import shell_output

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
    assert shell_output(code, env) == "False"
