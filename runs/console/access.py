"""Who may see and do what on the console, and the shared shape of every action.

Roles are Django groups (``setup_roles``): viewer (``runs.view_run``), operator
(``runs.operate_run``), approver (``runs.decide_approval``). The templates hide what
a user may not do; these checks are the gate (403 otherwise).
"""

import re
from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from runs.console.forms import undecodable_input, unstorable_field
from runs.engine.service import field_code, run_etag

VIEW_PERM = "runs.view_run"
OPERATE_PERM = "runs.operate_run"
DECIDE_PERM = "runs.decide_approval"
DOWNLOAD_PERM = "runs.view_artifact"


def actor_of(request: HttpRequest) -> str:
    """The event actor for the logged-in person: ``user:<username>``."""
    return f"user:{request.user.get_username()}"


def console_view(view: Callable) -> Callable:
    """Login required (redirect to the login page), then ``runs.view_run`` (403), then
    the query and form values (``unstorable_input``: 400)."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs):
        if not request.user.has_perm(VIEW_PERM):
            raise PermissionDenied("viewing runs needs the runs.view_run permission")
        return unstorable_input(request) or view(request, *args, **kwargs)

    return wrapper


def console_action(permission: str) -> Callable[[Callable], Callable]:
    """Decorate an action view: POST only (405), login, then ``permission`` (403).

    CSRF is enforced by the middleware for every POST, htmx ones included (the token
    travels in the ``X-CSRFToken`` header set by ``hx-headers`` on ``<body>``).
    """

    def decorator(view: Callable) -> Callable:
        @login_required
        @require_POST
        @wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs):
            if not request.user.has_perm(permission):
                raise PermissionDenied(f"this action needs the {permission} permission")
            return unstorable_input(request) or view(request, *args, **kwargs)

        return wrapper

    return decorator


def unstorable_input(request: HttpRequest) -> HttpResponse | None:
    """The 400 refusal for a query or form value no database column can hold (NUL, a
    lone surrogate; ``runs.console.forms.unstorable_field``) or that is not UTF-8 at
    all (``undecodable_input``: Django would hand the view U+FFFD instead), else
    ``None``; code ``invalid_input``, the text rule's. Checked once here for every
    console page and form, before the view reads anything, so no action writes half of
    a request and both databases answer alike."""
    name = undecodable_input(request)
    if name is not None:
        return refusal(
            request,
            title="Invalid input",
            message=f"The field {name!r} is not valid UTF-8 text. Nothing was done.",
            status=400,
            code="invalid_input",
        )
    for data in (request.GET, request.POST):
        name = unstorable_field(data)
        if name is not None:
            return refusal(
                request,
                title="Invalid input",
                message=f"The field {name!r} contains a NUL character or a lone surrogate, "
                "which cannot be stored. Nothing was done.",
                status=400,
                code=field_code(name),
            )
    return None


def render_page(
    request: HttpRequest, template: str, fragment: str, context: dict, status: int = 200
) -> HttpResponse:
    """One view, full page or fragment: the fragment alone for htmx requests (polling
    and partial swaps), the whole page otherwise."""
    name = fragment if getattr(request, "htmx", False) else template
    return render(request, name, context, status=status)


def refusal(
    request: HttpRequest,
    *,
    title: str,
    message: str,
    status: int = 409,
    back: str = "",
    code: str = "",
) -> HttpResponse:
    """The page (or fragment) that explains why an action was not done: a run that changed
    since the form was shown (409), a request the engine refused, invalid input (400).
    ``code`` and ``message`` also go into the audit record of a 403/409
    (``runs.refusals``); the page shows the code after the message (``[invalid_json]``),
    as the CLI does."""
    shown = message if not code or f"[{code}]" in message else f"{message} [{code}]"
    response = render_page(
        request,
        "console/refused.html",
        "partials/refused.html",
        {"title": title, "message": shown, "back": back},
        status=status,
    )
    # Read by the audit middleware (runs.refusals); not part of HttpResponse's type.
    response.refusal_code = code  # type: ignore[attr-defined]
    response.refusal_reason = message  # type: ignore[attr-defined]
    return response


#: Django's message for ``get_object_or_404`` finding no row: the model's name.
_NO_ROW = re.compile(r"No (\w+) matches the given query\.")


def not_found_code(exception: Exception | None) -> str:
    """The code of a console 404, as the CLI names the same miss: ``unknown_run``,
    ``unknown_approval`` (``unknown_<model>`` for a row ``get_object_or_404`` did not
    find; an id's own code for an ill-formed id, ``runs.id_converters.UnknownId``), else
    ``not_found`` (a path that names nothing)."""
    code = getattr(exception, "code", None)
    if isinstance(code, str):
        return code
    found = _NO_ROW.fullmatch(str(exception or ""))
    if found is None:
        return "not_found"
    return "unknown_" + re.sub(r"(?<!^)(?=[A-Z])", "_", found.group(1)).lower()


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """The console's 404 page (``handler404``): what was not found, with its code
    (``not_found_code``) on the page and on the response, as every refusal has."""
    code = not_found_code(exception)
    what = code.removeprefix("unknown_").replace("_", " ")
    return refusal(
        request,
        title="Not found",
        message=f"No such {'page' if code == 'not_found' else what}.",
        status=404,
        code=code,
    )


def form_version(run) -> str:
    """What a form's ``run_version`` field carries: the run's ETag unquoted
    (``"3.1.5d41402a"``: version, generation, budget digest), so a form rendered before
    any change an action makes (a status change, a resume, a budget raise) is stale."""
    return run_etag(run).strip('"')


def stale_run(request: HttpRequest, run, posted_version: str | None, back: str = ""):
    """``None`` if the form's ``run_version`` (``form_version``) still matches the run
    (re-read now), else the "this run changed, reload" refusal (409 ``run_changed``).
    On a match, the request carries the run's ETag for ``perform`` to act on."""
    run.refresh_from_db(fields=["status", "version", "generation", "budget"])
    if posted_version is not None and form_version(run) == str(posted_version).strip():
        # ``perform`` acts only if the run is still as just read, checked under the row
        # lock: of two concurrent submissions of one form, one acts, the other is told.
        # An attribute HttpRequest does not declare; ``perform`` reads it with getattr.
        setattr(request, "run_precondition", (run.pk, run_etag(run)))  # noqa: B010
        return None
    return refusal(
        request,
        code="run_changed",
        title="This run changed, reload",
        message=f"The run is now {run.status} (version {form_version(run)}); the page you "
        f"acted from showed version {posted_version or '?'}. Nothing was done.",
        back=back,
    )
