"""Creating, checking, revoking and throttling API tokens.

Tokens look like ``ao_<43 url-safe characters>`` (256 random bits), so a plain sha256
is a sufficient hash: there is nothing to brute-force that a slow hash would protect.
"""

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Case, DateTimeField, ExpressionWrapper, F, Q, Value, When
from django.db.models.functions import Now

from apitokens.models import ApiToken
from runs.engine.service import check_identifier, db_now

TOKEN_PREFIX = "ao_"
#: ``last_used_at`` is written at most this often per token (seconds), to keep reads cheap.
LAST_USED_RESOLUTION = 60


def hash_token(raw: str) -> str:
    """sha256 hex digest of the raw token string."""
    return hashlib.sha256(raw.encode()).hexdigest()


def create_token(user, name: str = "") -> tuple[ApiToken, str]:
    """Create a token for ``user`` labelled ``name`` (``""``: no label); returns ``(row,
    raw token)``. The raw token is not stored anywhere: show it to the user now. Raises
    ``InputRefused`` (``invalid_input``, field ``name``) for a label the identifier rule
    refuses (a control or bidi character, over 100 characters): nothing is created."""
    if name:
        check_identifier(name, "token_name", "name")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=raw[:10], token_hash=hash_token(raw)
    )
    return token, raw


def authenticate(raw: str) -> ApiToken | None:
    """The active token matching ``raw`` (with its user loaded), or ``None``. Records the
    last-used time (database clock, at most once per ``LAST_USED_RESOLUTION`` s)."""
    if not raw or not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=hash_token(raw), revoked_at__isnull=True)
        .first()
    )
    if token is None or not token.user.is_active:
        return None
    stale = ExpressionWrapper(
        Now() - timedelta(seconds=LAST_USED_RESOLUTION), output_field=DateTimeField()
    )
    ApiToken.objects.filter(
        Q(pk=token.pk) & (Q(last_used_at__isnull=True) | Q(last_used_at__lt=stale))
    ).update(last_used_at=Now())
    return token


def revoke(token: ApiToken) -> bool:
    """Revoke ``token``; returns ``False`` if it was already revoked."""
    return bool(
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=Now())
    )


@dataclass(frozen=True)
class ThrottleDecision:
    """``allowed``; when refused, ``retry_after`` seconds until the window resets."""

    allowed: bool
    retry_after: int = 0


def throttle(token: ApiToken, *, limit: int, period: float) -> ThrottleDecision:
    """Count one run creation for ``token`` in a fixed window of ``period`` seconds and
    allow at most ``limit`` per window.

    One conditional UPDATE (database clock, no read-then-write), so concurrent requests
    through several server processes share the count.
    """
    now = db_now()
    window = int(now.timestamp() // period)
    allowed = ApiToken.objects.filter(
        Q(pk=token.pk) & (~Q(throttle_window=window) | Q(throttle_count__lt=limit))
    ).update(
        throttle_count=Case(
            When(throttle_window=window, then=F("throttle_count") + 1), default=Value(1)
        ),
        throttle_window=window,
    )
    if allowed:
        return ThrottleDecision(True)
    return ThrottleDecision(False, max(1, int((window + 1) * period - now.timestamp()) + 1))
