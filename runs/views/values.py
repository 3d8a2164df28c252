"""The full value of one large payload shown truncated on the run page: a message's
content, an operation's arguments or result, an event's payload, a step's output.

Served as escaped-by-construction plain text (``text/plain`` with ``nosniff`` and a
sandboxing policy), never as HTML: the value is untrusted agent or tool output.
"""

import json

from django.http import HttpResponse

from runs.console.access import console_view
from runs.id_converters import UnknownId, get_or_unknown
from runs.models import Event, Message, Operation, Step

#: ``kind`` in the URL -> (model, field).
KINDS = {
    "message": (Message, "content"),
    "operation-arguments": (Operation, "arguments"),
    "operation-result": (Operation, "result"),
    "event": (Event, "payload"),
    "step-output": (Step, "output"),
}


@console_view
def full_value(request, run_id, kind, pk):
    """The whole value as text (JSON indented); 404 for an unknown kind or another run's
    row."""
    if kind not in KINDS:
        raise UnknownId("value", kind)
    model, field = KINDS[kind]
    row = get_or_unknown(model._default_manager.only(field), "value", pk=pk, run_id=run_id)
    value = getattr(row, field)
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    response = HttpResponse(text, content_type="text/plain; charset=utf-8")
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response
