from django.urls import path

from apitokens import views
from runs import id_converters  # noqa: F401 - registers <token:...>

app_name = "apitokens"

urlpatterns = [
    path("", views.tokens, name="tokens"),
    path("<token:token_id>/revoke/", views.revoke_view, name="revoke"),
]
