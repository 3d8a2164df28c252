"""The shared shape of a console action: call one engine function and turn its refusal
into a clear page, its success into a message and a redirect (POST/redirect/GET)."""

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme

from runs.console.access import refusal
from runs.console.forms import InvalidInput
from runs.engine.service import ControlError, expect_run_etag

#: ControlError codes that mean "someone else moved first": shown as a changed run.
CHANGED_CODES = {
    "run_changed",
    "run_terminal",
    "not_allowed_in_state",
    "step_changed",
    "step_not_unknown",
    "takeover_resolved",
    "already_claimed",
    "decision_conflict",
}


def back_url(request: HttpRequest, default: str) -> str:
    """The form's ``next`` if it is a local URL, else ``default``."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return default


def control_refusal(request: HttpRequest, exc: ControlError, *, back: str) -> HttpResponse:
    """The page for an engine refusal, with its code (also for the audit record): 400
    "Invalid input" for a code of bad input (``ControlError.bad_input``), 403 for a
    policy refusal (a ``PermissionDenied`` such as self-approval), 409 otherwise ("This
    run changed, reload" for ``CHANGED_CODES``, else "Refused")."""
    detail = "; ".join(f"{k}: {v}" for k, v in exc.unsaid_errors().items())
    message = f"{exc.message} [{exc.code}]" + (f" ({detail})" if detail else "")
    if exc.bad_input:
        title, status = "Invalid input", 400
    elif isinstance(exc, PermissionDenied):
        title, status = "Refused", 403
    elif exc.code in CHANGED_CODES:
        title, status = "This run changed, reload", 409
    else:
        title, status = "Refused", 409
    return refusal(request, title=title, message=message, status=status, back=back, code=exc.code)


def perform(
    request: HttpRequest, call: Callable[[], Any], *, back: str, success: str | Callable[[Any], str]
) -> HttpResponse:
    """Run ``call`` (an engine function call), conditional on the run being as
    ``stale_run`` read it (``runs.engine.control.preconditions``); on success flash
    ``success`` and redirect to ``back``; on a refusal render why (409 for a changed
    run or a refused request, 400 for invalid input: ``InvalidInput`` or an engine code
    of bad input (``ControlError.bad_input``), 403 for a permission the engine checks
    itself)."""
    run_id, etag = getattr(request, "run_precondition", (None, None))
    try:
        with expect_run_etag(run_id, etag):
            result = call()
    except InvalidInput as exc:
        return refusal(
            request, title="Invalid input", message=str(exc), status=400, back=back, code=exc.code
        )
    except ControlError as exc:
        return control_refusal(request, exc, back=back)
    messages.success(request, success(result) if callable(success) else success)
    return redirect(back)
