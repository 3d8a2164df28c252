"""``agentops_client.Client`` against the server in the test process: an httpx
transport that hands each request to Django's test client, so the client's requests
share the test's database connection (and transaction) as the test client's do."""

from __future__ import annotations

import httpx
from django.test import Client as DjangoClient

from agentops_client import Client

#: Request headers the test client sets itself (or that mean nothing in-process).
_OWN_HEADERS = {"host", "content-length", "content-type", "accept-encoding", "connection"}


class DjangoTransport(httpx.BaseTransport):
    """Serves httpx requests with ``django.test.Client`` (no sockets, no server)."""

    def __init__(self) -> None:
        self._django = DjangoClient()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _OWN_HEADERS}
        response = self._django.generic(
            request.method,
            request.url.raw_path.decode("ascii"),
            data=request.read(),
            content_type=request.headers.get("content-type", "application/octet-stream"),
            headers=headers,
        )
        return httpx.Response(
            response.status_code, headers=list(response.items()), content=response.content
        )


def in_process_client(token: str) -> Client:
    """A ``Client`` with ``token`` whose requests the test process's Django serves."""
    return Client("http://testserver", token, transport=DjangoTransport(), retries=0)
