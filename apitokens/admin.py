from django.contrib import admin

from apitokens.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Read-only list of tokens (they are created with ``manage.py api_token create`` or
    the console so the raw value can be shown once)."""

    list_display = ["prefix", "user", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["prefix", "user__username", "name"]
    readonly_fields = [
        "user",
        "name",
        "prefix",
        "token_hash",
        "created_at",
        "last_used_at",
        "throttle_window",
        "throttle_count",
    ]
    actions = ["revoke_tokens"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description="Revoke selected tokens")
    def revoke_tokens(self, request, queryset):
        from apitokens.services import revoke

        count = sum(revoke(token) for token in queryset)
        self.message_user(request, f"{count} token(s) revoked.")
