"""Helpers for tests that talk to a real ASGI server (``manage.py serve``, uvicorn) of a
``Deployment`` over loopback HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from collections.abc import Iterator

import httpx

from tests.support.services import Deployment
from tests.support.waiting import wait_until

START_TIMEOUT = 90  # seconds; a cold Django import on a loaded 2-core machine


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A ``manage.py serve`` process of ``deployment`` on ``port``; ``url`` is its base."""

    def __init__(self, deployment: Deployment, port: int | None = None, **extra_env):
        self.deployment = deployment
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = deployment.popen("serve", "--port", self.port, extra_env=extra_env or None)
        wait_until(
            self._answers, what="the server to answer", timeout=START_TIMEOUT, procs=[self.proc]
        )

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited: {self.deployment.logs(self.proc)}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(self.url + "/api/v1/openapi.json", timeout=5).status_code == 200
        return False

    def kill(self) -> None:
        """SIGKILL the server (a crash, not a graceful stop) and reap it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def make_user(
    deployment: Deployment, username: str, *, staff: bool = False, perms: tuple[str, ...] = ()
) -> str:
    """Create ``username`` (optionally staff with ``app.codename`` permissions) and return
    a new API token for it, made with ``manage.py api_token create``."""
    code = (
        "from django.contrib.auth.models import Permission, User\n"
        f"u = User.objects.create_user({username!r}, is_staff={staff!r})\n"
        f"for p in {list(perms)!r}:\n"
        "    app, codename = p.split('.')\n"
        "    perm = Permission.objects.get(content_type__app_label=app, codename=codename)\n"
        "    u.user_permissions.add(perm)\n"
    )
    deployment.shell(code)
    return deployment.manage("api_token", "create", username, check=True).stdout.strip()


def sse_events(response: httpx.Response) -> Iterator[dict]:
    """Parse an SSE response into ``{"id", "event", "data"}`` dicts (``data`` decoded
    from JSON) and ``{"comment": text}`` for comment lines, as they arrive."""
    frame: dict = {}
    for line in response.iter_lines():
        if line.startswith(":"):
            yield {"comment": line[1:].strip()}
        elif line == "":
            if "data" in frame:
                frame["data"] = json.loads(frame["data"])
                yield frame
            frame = {}
        else:
            name, _, value = line.partition(":")
            frame[name] = value[1:] if value.startswith(" ") else value
