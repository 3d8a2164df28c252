"""``GET /api/v1/runs/{id}/stream``: the run's events as Server-Sent Events.

Each event is sent as ``id: <seq>``, ``event: <type>``, ``data: <event JSON>``. A client
that reconnects with ``Last-Event-ID`` (header, or the ``last_event_id`` query
parameter for clients that cannot set headers) gets every event after that seq, then
live ones. The stream ends once the run is terminal and every event up to the run's
last seq has been sent. ``: heartbeat`` comments keep idle connections open through
proxies.

No database connection is held while a client waits: each poll is one short
``sync_to_async`` call that reads and then closes its connection. Gap-free seqs,
allocated under the run-row lock (``runs.engine.state.gateway``), mean reading ``seq > last``
up to the run's ``event_seq`` never skips an event that commits later.
"""

import asyncio
import json
import re
import time
from uuid import UUID

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import close_old_connections, connection
from django.http import StreamingHttpResponse
from ninja import Header, Query, Router

from apitokens import services as tokens
from runs.api import access
from runs.api.documents import event_document
from runs.api.errors import ApiError
from runs.api.schemas import Error
from runs.models import Event, Run, Step
from runs.states import RUN_TERMINAL

router = Router(tags=["stream"])
BATCH = 500
#: Largest event seq a client may resume after (``Event.seq`` is a 32-bit integer).
MAX_SEQ = 2**31 - 1

#: An event seq as the stream writes it: "0", or 1 to 10 digits without a leading zero.
SEQ_TEXT = re.compile(r"0|[1-9][0-9]{0,9}")


def event_seq(value: str, name: str) -> int:
    """The event seq a client resumes after, from the ``Last-Event-ID`` header or the
    ``last_event_id`` query parameter (``name``), parsed the same way for both: ASCII
    decimal digits only, as the stream's ``id:`` lines write them (no sign, no spaces,
    no leading zeros: ``"0"`` is the only seq starting with 0), ``0..MAX_SEQ``. Raises
    ``ApiError`` 422 ``invalid_last_event_id`` otherwise (a signed, padded, fractional
    or out-of-range value would silently replay from the wrong place)."""
    if not SEQ_TEXT.fullmatch(value) or int(value) > MAX_SEQ:
        raise ApiError(
            422,
            "invalid_last_event_id",
            f"{name} must be an event seq: an integer from 0 to {MAX_SEQ}, digits only",
            {name: f"must be an integer from 0 to {MAX_SEQ}, digits only"},
        )
    return int(value)


def _authorize(authorization: str, query_token: str | None, run_id: UUID) -> None:
    """Resolve the bearer token and check the run is visible; raises ``ApiError``."""
    raw = authorization[7:].strip() if authorization.lower().startswith("bearer ") else query_token
    try:
        token = tokens.authenticate(raw or "")
        if token is None:
            raise ApiError(
                401,
                "unauthorized",
                "a valid API token is required",
                headers={"WWW-Authenticate": "Bearer"},
            )
        access.get_run(token.user, run_id)
    finally:
        connection.close()


def _poll(run_id: UUID, after: int) -> tuple[list[dict], int, bool]:
    """Events after ``after`` (up to ``BATCH``), the run's last seq, and whether the run
    is terminal; closes this thread's database connection before returning."""
    try:
        close_old_connections()
        row = Run.objects.filter(pk=run_id).values_list("event_seq", "status").first()
        if row is None:
            return [], after, True
        last_seq, status = row
        events = list(
            Event.objects.filter(run_id=run_id, seq__gt=after, seq__lte=last_seq).order_by("seq")[
                :BATCH
            ]
        )
        step_ids = {e.step_id for e in events if e.step_id}
        names = (
            dict(Step.objects.filter(pk__in=step_ids).values_list("pk", "name")) if step_ids else {}
        )
        return [event_document(e, names) for e in events], last_seq, status in RUN_TERMINAL
    finally:
        connection.close()


def _frame(doc: dict, named: bool) -> str:
    data = json.dumps(doc, cls=DjangoJSONEncoder, separators=(",", ":"))
    kind = f"event: {doc['type']}\n" if named else ""
    return f"id: {doc['seq']}\n{kind}data: {data}\n\n"


async def event_frames(run_id: UUID, after: int, *, named: bool = True):
    """Yield SSE frames for the run's events after ``after`` until it is terminal and
    fully sent; heartbeat comments while idle. ``named=False`` leaves out the ``event:``
    line, so a browser's ``EventSource.onmessage`` sees every event (the console)."""
    poll = settings.AGENTOPS_SSE_POLL_SECONDS
    heartbeat = settings.AGENTOPS_SSE_HEARTBEAT_SECONDS
    yield f"retry: {int(max(poll, 1) * 1000)}\n\n"
    last_sent = time.monotonic()
    while True:
        docs, last_seq, terminal = await sync_to_async(_poll, thread_sensitive=False)(run_id, after)
        for doc in docs:
            yield _frame(doc, named)
            after = doc["seq"]
        if docs:
            last_sent = time.monotonic()
            if after < last_seq:
                continue  # more than one batch waiting
        if terminal and after >= last_seq:
            return
        if time.monotonic() - last_sent >= heartbeat:
            yield ": heartbeat\n\n"
            last_sent = time.monotonic()
        await asyncio.sleep(poll)


@router.get(
    "/runs/{run:run_id}/stream",
    auth=None,
    summary="Follow the run's events (SSE)",
    response={200: None, 401: Error, 404: Error, 405: Error, 422: Error},
    openapi_extra={
        "security": [{"TokenAuth": []}],
        "responses": {
            "200": {
                "description": "text/event-stream of the run's events",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            }
        },
    },
)
async def stream_events(
    request,
    run_id: UUID,
    last_event_id: str | None = Query(
        None,
        description=f"resume after this event seq (0..{MAX_SEQ}); the header wins if both",
    ),
    last_event_id_header: str | None = Header(None, alias="Last-Event-ID"),
    access_token: str | None = Query(None, max_length=200),
):
    """Server-Sent Events of the run, replaying everything after ``Last-Event-ID``
    (header or ``last_event_id`` query parameter), then following live events. Auth:
    the bearer header, or ``access_token`` for EventSource clients that cannot set
    headers."""
    after = 0
    if last_event_id not in (None, ""):
        after = event_seq(last_event_id, "last_event_id")
    if last_event_id_header not in (None, ""):
        after = event_seq(last_event_id_header, "Last-Event-ID")
    await sync_to_async(_authorize, thread_sensitive=False)(
        request.headers.get("Authorization", ""), access_token, run_id
    )
    response = StreamingHttpResponse(event_frames(run_id, after), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response
