"""A Python client for the AgentOps JSON API (``/api/v1``), on httpx.

It needs nothing of the server (no Django): an application installs it beside httpx.

    from agentops_client import Client

    with Client("http://127.0.0.1:8000", token) as api:
        run = api.start_run("room_temperature", thread_id="t1",
                            input={"question": "How warm is the living room?"},
                            idempotency_key="k1")
        for event in api.stream_events(run):
            print(event.seq, event.type)
        print(api.get_run(run).status)
"""

from agentops_client.client import Client
from agentops_client.errors import ApiError, ClientError, StreamError, WaitTimeout
from agentops_client.models import (
    TERMINAL_STATUSES,
    Approval,
    Attempt,
    AttemptLog,
    Budget,
    BulkReplay,
    BulkReplayed,
    BulkSkipped,
    Checkpoint,
    Child,
    Delivery,
    Event,
    EventPage,
    Message,
    Parent,
    Replay,
    Run,
    RunPage,
    RunSummary,
    Schedule,
    Step,
    StepPage,
    Tick,
    TickResult,
    Usage,
)

__all__ = [
    "TERMINAL_STATUSES",
    "ApiError",
    "Approval",
    "Attempt",
    "AttemptLog",
    "Budget",
    "BulkReplay",
    "BulkReplayed",
    "BulkSkipped",
    "Checkpoint",
    "Child",
    "Client",
    "ClientError",
    "Delivery",
    "Event",
    "EventPage",
    "Message",
    "Parent",
    "Replay",
    "Run",
    "RunPage",
    "RunSummary",
    "Schedule",
    "Step",
    "StepPage",
    "StreamError",
    "Tick",
    "TickResult",
    "Usage",
    "WaitTimeout",
]
