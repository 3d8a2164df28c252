"""The client's exceptions: ``ApiError`` for every refusal the API answers,
``WaitTimeout`` when a run does not reach a state in time, ``StreamError`` when a
stream cannot be resumed. Connection failures that outlast the retries stay
``httpx.TransportError`` (``httpx.ConnectError``, ``httpx.ReadTimeout``, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from agentops_client.models import Run


class ClientError(Exception):
    """Base of the client's own exceptions."""


class ApiError(ClientError):
    """A 4xx or 5xx answer: ``status`` (HTTP), ``code`` (stable, machine-readable, e.g.
    ``idempotency_key_reused``, ``run_changed``, ``not_found``), ``message`` (for
    people), ``errors`` (``{field: what is wrong}``, fields as dotted paths into the
    body or header names, may be empty), ``headers`` (e.g. ``Retry-After``). A body
    that is not the API's JSON error (a proxy's HTML page) gives code ``http_error``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        errors: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors or {}
        self.headers = headers or {}

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        """The error an error response carries (its body read already)."""
        body: Any = None
        try:
            body = response.json()
        except ValueError:
            pass
        headers = dict(response.headers)
        if isinstance(body, dict) and isinstance(body.get("code"), str):
            errors = body.get("errors")
            return cls(
                response.status_code,
                body["code"],
                str(body.get("message", "")),
                {str(k): str(v) for k, v in errors.items()} if isinstance(errors, dict) else {},
                headers,
            )
        text = response.text[:200].strip() or response.reason_phrase
        return cls(response.status_code, "http_error", text, {}, headers)


class WaitTimeout(ClientError):
    """The run did not reach one of the awaited statuses within the timeout; ``run`` is
    the run as last read (``None`` if it could not be read at all)."""

    def __init__(self, message: str, run: Run | None):
        super().__init__(message)
        self.run = run


class StreamError(ClientError):
    """The event stream broke and could not be resumed within the reconnect window;
    ``last_event_id`` is the seq of the last event delivered (resume from it)."""

    def __init__(self, message: str, last_event_id: int):
        super().__init__(message)
        self.last_event_id = last_event_id
