from django.urls import path

from apitokens import views

app_name = "apitokens"

urlpatterns = [
    path("", views.tokens, name="tokens"),
    path("<int:token_id>/revoke/", views.revoke_view, name="revoke"),
]
