"""The console's API tokens page: a logged-in user lists, creates and revokes their own
tokens. A new token is shown once, on the page that created it."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from apitokens.models import ApiToken
from apitokens.services import create_token, revoke
from runs.console.access import unstorable_input


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request):
    """GET: the user's tokens. POST (``name``): create one and show it once. A name
    with NUL is a 400, as on every console form (``unstorable_input``)."""
    refused = unstorable_input(request)
    if refused is not None:
        return refused
    created = None
    if request.method == "POST":
        _, created = create_token(request.user, request.POST.get("name", "").strip())
    rows = ApiToken.objects.filter(user=request.user).order_by("-created_at", "-pk")
    return render(request, "apitokens/tokens.html", {"tokens": rows, "created": created})


@login_required
@require_POST
def revoke_view(request, token_id: int):
    """Revoke one of the user's own tokens (404 for anyone else's)."""
    revoke(get_object_or_404(ApiToken, pk=token_id, user=request.user))
    return redirect("apitokens:tokens")
