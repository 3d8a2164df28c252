from django.apps import AppConfig


class ApiTokensConfig(AppConfig):
    name = "apitokens"
    verbose_name = "API tokens"
    default_auto_field = "django.db.models.BigAutoField"
