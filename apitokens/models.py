"""API tokens: a user's bearer credentials for the JSON API, stored hashed."""

from django.conf import settings
from django.db import models
from django.db.models.functions import Now

from runs.checked_fields import CheckedCharField


class ApiToken(models.Model):
    """One bearer token of ``user``.

    Only ``token_hash`` (sha256 hex of the whole token) is stored; the token itself is
    shown once when created. ``prefix`` (the first characters) identifies it in lists.
    ``throttle_window`` / ``throttle_count``: the fixed window (an integer number of
    ``AGENTOPS_API_CREATE_RATE`` periods since the epoch, by the database clock) and the
    run creations counted in it.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = CheckedCharField(max_length=100, blank=True, default="")
    prefix = CheckedCharField(max_length=16)
    token_hash = CheckedCharField(max_length=64, unique=True)
    created_at = models.DateTimeField(db_default=Now())
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    throttle_window = models.BigIntegerField(default=0)
    throttle_count = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [
            # Token list of a user (management command, admin).
            models.Index(fields=["user", "-created_at"], name="apitoken_user_created"),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
