"""A pytest plugin, installed with AgentOps (the ``pytest11`` entry point): a test that
needs Django (a ``django_db`` mark or one of pytest-django's database, client or
settings fixtures) while no Django settings are configured is an error naming
``DJANGO_SETTINGS_MODULE``, not pytest-django's quiet ``no Django settings`` skip. A
workflow's tests in a project of one's own (docs/first-workflow.md) would otherwise
report "2 skipped" and look green.

Loads nothing of Django or AgentOps; a session without pytest-django is left alone.
"""

import pytest

#: pytest-django's fixtures that skip when no settings are configured.
NEEDS_SETTINGS = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_setup",
        "client",
        "async_client",
        "admin_client",
        "admin_user",
        "django_user_model",
        "django_username_field",
        "rf",
        "async_rf",
        "settings",
        "live_server",
        "mailoutbox",
        "django_assert_num_queries",
        "django_assert_max_num_queries",
        "django_capture_on_commit_callbacks",
    }
)

UNCONFIGURED = (
    "this test needs Django settings and none are configured, so pytest-django would skip "
    "it: set DJANGO_SETTINGS_MODULE=agentops.settings (a pytest.ini with "
    "'[pytest]' and 'DJANGO_SETTINGS_MODULE = agentops.settings' next to your tests, or "
    "the environment variable; docs/first-workflow.md)"
)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail ``item`` with ``UNCONFIGURED`` (a setup error) when it needs Django settings
    and none are configured."""
    try:
        from pytest_django.lazy_django import django_settings_is_configured
    except ImportError:
        return
    needs = item.get_closest_marker("django_db") is not None or bool(
        NEEDS_SETTINGS & set(getattr(item, "fixturenames", ()))
    )
    if needs and not django_settings_is_configured():
        pytest.fail(UNCONFIGURED, pytrace=False)
