"""What the API would otherwise ignore is refused, not ignored, on every operation
(``api.add_decorator(refuse_ignored_input, mode="view")``), after the URL named an
operation and before authentication, parsing and the view, so nothing runs for a
refused request:

- a query parameter the operation does not take: 400 ``unknown_parameter`` naming it
  (a ``request_id`` sent in the query string instead of the ``Idempotency-Key`` header
  would otherwise leave a signal silently not idempotent);
- a body not sent as JSON (``Content-Type`` other than ``application/json``, parameters
  such as ``charset`` allowed, or none): 415 ``unsupported_media_type`` (a form or text
  body would otherwise be read as JSON anyway). A request without a body needs no type.
"""

import inspect
from functools import wraps

from runs.api.errors import ApiError

#: The code of a query parameter the operation does not take.
UNKNOWN_PARAMETER = "unknown_parameter"
#: The code of a body not sent as JSON.
UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"


def query_names(operation) -> frozenset[str]:
    """The query parameter names ``operation`` (a ninja ``Operation``) takes, as a
    client sends them: a schema's fields (``Query[RunFilters]``) flattened, an alias
    instead of its parameter's name."""
    names: set[str] = set()
    for model in operation.models:
        if model.__ninja_param_source__ == "query":
            names.update(model.__ninja_flatten_map__)
    return frozenset(names)


def is_json_media_type(content_type: str) -> bool:
    """Whether the ``Content-Type`` header value ``content_type`` is
    ``application/json`` (any case, with or without parameters such as ``charset``)."""
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def ignored_input(request, known: frozenset[str]) -> ApiError | None:
    """The refusal of what ``request`` carries that an operation taking the query
    parameters ``known`` would ignore (see the module docstring), or ``None``."""
    for name in request.GET:
        if name not in known:
            return ApiError(
                400,
                UNKNOWN_PARAMETER,
                f"unknown query parameter {name!r}",
                {name: "unknown parameter"},
            )
    if request.body and not is_json_media_type(request.META.get("CONTENT_TYPE") or ""):
        return ApiError(
            415,
            UNSUPPORTED_MEDIA_TYPE,
            "the request body must be JSON, sent with Content-Type: application/json",
            {"Content-Type": "must be application/json"},
        )
    return None


def refuse_ignored_input(run):
    """Wrap an operation's ``run`` (sync or async, as ninja hands it to a view-mode
    decorator) so that ``ignored_input``'s refusal is answered through the API's error
    handlers instead of running it."""
    operation = inspect.unwrap(run).__self__
    known = query_names(operation)

    if inspect.iscoroutinefunction(run):

        @wraps(run)
        async def async_gate(request, *args, **kwargs):
            refused = ignored_input(request, known)
            if refused is not None:
                return operation.api.on_exception(request, refused)
            return await run(request, *args, **kwargs)

        return async_gate

    @wraps(run)
    def gate(request, *args, **kwargs):
        refused = ignored_input(request, known)
        if refused is not None:
            return operation.api.on_exception(request, refused)
        return run(request, *args, **kwargs)

    return gate
