import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
application = get_wsgi_application()

from agentops.db_session import use_process_kind  # noqa: E402 - needs Django set up

use_process_kind("web")
