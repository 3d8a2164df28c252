"""ASGI entry point (uvicorn agentops.asgi:application): serves the API, its SSE
stream and the console. Persistent database connections are off here (see settings)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
os.environ.setdefault("AGENTOPS_CONN_MAX_AGE", "0")
application = get_asgi_application()

from agentops.db_session import use_process_kind  # noqa: E402 - needs Django set up

use_process_kind("web")
