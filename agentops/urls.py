from django.contrib import admin
from django.urls import include, path

from runs.api.app import api
from runs.api.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", api.urls),
    path("metrics", metrics_view, name="metrics"),
]
