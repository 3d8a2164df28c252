"""The console's API tokens page: a logged-in user lists, creates and revokes their own
tokens. A new token is shown once, on the page that created it."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from apitokens.models import ApiToken
from apitokens.services import create_token, revoke
from runs.console.access import refusal, unstorable_input
from runs.engine.service import ControlError
from runs.id_converters import get_or_unknown


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request):
    """GET: the user's tokens. POST (``name``): create one and show it once. A name the
    identifier rule refuses is a 400 naming its code, as on every console form."""
    refused = unstorable_input(request)
    if refused is not None:
        return refused
    created = None
    if request.method == "POST":
        try:
            _, created = create_token(request.user, request.POST.get("name", "").strip())
        except ControlError as exc:
            return refusal(
                request, title="Invalid input", message=exc.message, status=400, code=exc.code
            )
    rows = ApiToken.objects.filter(user=request.user).order_by("-created_at", "-pk")
    return render(request, "apitokens/tokens.html", {"tokens": rows, "created": created})


@login_required
@require_POST
def revoke_view(request, token_id: int):
    """Revoke one of the user's own tokens (404 for anyone else's)."""
    revoke(get_or_unknown(ApiToken.objects.filter(user=request.user), "token", pk=token_id))
    return redirect("apitokens:tokens")
