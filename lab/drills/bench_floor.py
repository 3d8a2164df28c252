"""``bench`` part ``agents_floor``: what the agents part's outside work costs in CPU
alone, without the engine, and the best steps/s those costs leave on this machine.

Measured, each in its own process so one's CPU is not counted as another's:

- the model client: ``concurrency`` requests at once, ``rounds`` times, on one asyncio
  loop through one ``openai.AsyncOpenAI`` (the SDK alone) and through Pydantic AI's
  ``model_request`` on the same client (the path a step takes), against the bench's
  model server (``WaitingModelServer``) answering after 0 s and after ``wait_s``;
  CPU ms per request of the client process (``time.process_time``, every thread);
- the model server: its process's CPU ms per request answered;
- one PostgreSQL round trip (``SELECT 1`` in autocommit through psycopg): CPU ms of the
  client and of the server backend serving it (``/proc/PID/stat`` of that backend).

The floor of one step is one model request (client + server) and ``round_trips``
database round trips (client + backend); ``cores`` CPUs give at most ``cores x 1000 /
floor`` steps/s, before the engine spends any CPU of its own.
"""

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from django.conf import settings

#: Database round trips of a chained step the floor counts (the engine's target).
FLOOR_ROUND_TRIPS = 2

_SERVE = (
    "import json, os, resource, sys, django\n"
    "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'agentops.settings')\n"
    "django.setup()\n"
    "from lab.drills.bench_agents import WaitingModelServer\n"
    "with WaitingModelServer(float(sys.argv[1])) as s:\n"
    "    print(s.base_url, flush=True)\n"
    "    sys.stdin.read()\n"
    "    u = resource.getrusage(resource.RUSAGE_SELF)\n"
    "    print(json.dumps({'cpu_s': u.ru_utime + u.ru_stime, 'answered': s.count}), flush=True)\n"
)


def bench_agents_floor(wait_s: float, concurrency: int, say, *, rounds: int = 3) -> dict:
    """Run the part (module docstring); returns its figures: per model request the
    client's CPU ms (``openai_sdk_ms``, ``pydantic_ai_ms``, each at wait 0 and
    ``wait_s``) and the server's (``server_ms``), per database round trip the client's
    and the backend's CPU ms, and ``best_steps_per_s`` at ``FLOOR_ROUND_TRIPS``."""
    say(f"agents_floor: {concurrency} requests at once x {rounds} rounds, waits 0 and {wait_s} s")
    client: dict[str, float] = {}
    server_ms: list[float] = []
    for wait in (0.0, wait_s):
        for path in ("openai_sdk", "pydantic_ai"):
            with _ModelServerProcess(wait) as srv:
                count = concurrency * rounds
                cpu = _client_cpu(path, srv.base_url, concurrency, count)
                client[f"{path}_ms_wait_{wait:g}"] = round(1000 * cpu / count, 3)
            server_ms.append(1000 * srv.cpu_s / max(srv.answered, 1))
    pg_client, pg_server = _pg_round_trip_cpu(3000)
    trips_ms = FLOOR_ROUND_TRIPS * (pg_client + pg_server)
    floor_ms = client[f"openai_sdk_ms_wait_{wait_s:g}"] + max(server_ms) + trips_ms
    through_ms = client[f"pydantic_ai_ms_wait_{wait_s:g}"] + max(server_ms) + trips_ms
    cores = os.cpu_count() or 1
    return {
        "concurrency": concurrency,
        "wait_s": wait_s,
        "client_ms_per_request": client,
        "server_ms_per_request": round(max(server_ms), 3),
        "pg_round_trip_client_ms": round(pg_client, 4),
        "pg_round_trip_server_ms": round(pg_server, 4),
        "round_trips": FLOOR_ROUND_TRIPS,
        "floor_ms_per_step": round(floor_ms, 3),
        "floor_ms_per_step_pydantic_ai": round(through_ms, 3),
        "cores": cores,
        "best_steps_per_s": round(cores * 1000 / floor_ms, 1),
        "best_steps_per_s_pydantic_ai": round(cores * 1000 / through_ms, 1),
        "notes": "floor = the SDK's client CPU (or Pydantic AI's, the path a step takes) "
        "at the bench's wait + the server's per request + round_trips x (client + "
        "backend) per round trip; best = cores x 1000 / floor, with no CPU left for the "
        "engine or anything else on the machine.",
    }


class _ModelServerProcess:
    """``WaitingModelServer`` in a subprocess; after the block ``cpu_s`` is its CPU
    seconds (start-up included, a few ms) and ``answered`` its answered requests."""

    def __init__(self, wait_s: float):
        self.wait_s = wait_s
        self.cpu_s = 0.0
        self.answered = 0

    def __enter__(self) -> "_ModelServerProcess":
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE, str(self.wait_s)],
            cwd=settings.BASE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        self.base_url = self._proc.stdout.readline().strip()
        return self

    def __exit__(self, *exc) -> None:
        out, _ = self._proc.communicate("", timeout=60)
        last = json.loads(out.strip().splitlines()[-1])
        self.cpu_s, self.answered = last["cpu_s"], last["answered"]


def _client_cpu(path: str, base_url: str, concurrency: int, count: int) -> float:
    """CPU seconds of this process for ``count`` requests, ``concurrency`` at once, by
    ``path`` (``openai_sdk`` or ``pydantic_ai``), after one warm-up request each."""
    import httpx2
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient
    from pydantic_ai.direct import model_request
    from pydantic_ai.messages import ModelRequest, UserPromptPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async def main() -> float:
        limits = httpx2.Limits(max_connections=None, max_keepalive_connections=concurrency)
        client = AsyncOpenAI(
            base_url=base_url,
            api_key="bench",
            max_retries=0,
            http_client=DefaultAsyncHttpxClient(limits=limits),
        )
        model = OpenAIChatModel("bench", provider=OpenAIProvider(openai_client=client))

        async def one() -> None:
            if path == "openai_sdk":
                await client.chat.completions.create(
                    model="bench", messages=[{"role": "user", "content": "a1"}], timeout=60
                )
            else:
                await model_request(
                    model,
                    [ModelRequest(parts=[UserPromptPart("a1")])],
                    model_settings={"timeout": 60.0},
                )

        async def lane(n: int) -> None:
            for _ in range(n):
                await one()

        await asyncio.gather(*(one() for _ in range(concurrency)))  # connections, imports
        started = time.process_time()
        await asyncio.gather(*(lane(count // concurrency) for _ in range(concurrency)))
        spent = time.process_time() - started
        await client.close()
        return spent

    return asyncio.run(main())


def _pg_round_trip_cpu(trips: int) -> tuple[float, float]:
    """CPU ms per ``SELECT 1`` round trip: (this client, the server backend)."""
    url = settings.DATABASES["default"]
    with psycopg.connect(
        host=url["HOST"],
        port=url["PORT"],
        user=url["USER"],
        password=url["PASSWORD"] or None,
        dbname=url["NAME"],
        autocommit=True,
    ) as conn:
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        before = _proc_cpu_s(backend)
        started = time.process_time()
        for _ in range(trips):
            conn.execute("SELECT 1").fetchone()
        client = time.process_time() - started
        server = _proc_cpu_s(backend) - before
    return 1000 * client / trips, 1000 * server / trips


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
