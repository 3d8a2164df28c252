"""``/runs/<id>/stream/``: the run page's live feed, the run's events as Server-Sent
Events for the console's session (the API's stream, ``runs.api.stream``, wants a
token). ``runs/static/runs/run_live.js`` follows it and tells htmx the run moved."""

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from runs.api.stream import MAX_SEQ, SEQ_TEXT, event_frames
from runs.console.access import VIEW_PERM
from runs.models import Run


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"code": code, "message": message}, status=status)


async def run_stream(request: HttpRequest, run_id) -> HttpResponseBase:
    """The run's events after ``Last-Event-ID`` (or ``?after=N``), then live ones, until
    the run is terminal. 401 for an anonymous visitor, 403 without ``runs.view_run``,
    404 for no such run, 400 for a seq that is not one; 204 (which tells a browser not
    to reconnect) when served by a WSGI server, which would hold a thread until the run
    ends: the page then refreshes on its timer."""
    if "wsgi.version" in request.META:
        return HttpResponse(status=204)
    user = await request.auser()
    if not user.is_authenticated:
        return _error(401, "login_required", "log in to the console first")
    if not await sync_to_async(user.has_perm)(VIEW_PERM):
        return _error(403, "permission_denied", f"following a run needs {VIEW_PERM}")
    text = request.headers.get("Last-Event-ID") or request.GET.get("after") or "0"
    if not SEQ_TEXT.fullmatch(text) or int(text) > MAX_SEQ:
        return _error(400, "invalid_after", f"after must be an event seq, 0 to {MAX_SEQ}")
    if not await Run.objects.filter(pk=run_id).aexists():
        return _error(404, "unknown_run", "no such run")  # as the console's 404 pages
    response = StreamingHttpResponse(
        event_frames(run_id, int(text), named=False), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response
