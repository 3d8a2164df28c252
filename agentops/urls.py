from django.conf import settings
from django.contrib import admin
from django.contrib.staticfiles.views import serve as serve_static
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from agentops.health import healthz, readyz
from runs.api.app import api
from runs.api.metrics import metrics_view

#: A missing run or approval is a page with its code (unknown_run...), as on the CLI.
handler404 = "runs.console.access.page_not_found"

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    # Browsers ask for /favicon.ico whatever the page links (the admin, the API docs).
    path("favicon.ico", RedirectView.as_view(url=static("runs/favicon.svg"), permanent=True)),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", api.urls),
    path("metrics", metrics_view, name="metrics"),
    path("tokens/", include("apitokens.urls")),
    path("", include("runs.urls")),
]

if settings.AGENTOPS_SERVE_STATIC and not settings.DEBUG:
    # The console's assets (vendored htmx, one stylesheet) from the app static dirs, so
    # `runserver` and a bare deployment work without a separate static file server.
    urlpatterns.append(
        re_path(r"^static/(?P<path>.*)$", serve_static, {"insecure": True}),
    )
