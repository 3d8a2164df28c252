"""Storage per workflow: database and artifact bytes, for the overview and ``/metrics``.

``db_bytes`` is the size of the run data as the database stores it as text (run input,
step inputs and outputs, checkpoints, ledger arguments and results, events, messages and
shared payloads; characters of the stored JSON, which are bytes for ASCII), summed per
workflow; ``payload_bytes`` is the part held once in the payload store; ``artifact_bytes``
the sizes of the artifact files. Counting scans those tables, so the figures are cached
for ``CACHE_SECONDS`` per process.
"""

from django.core.cache import cache
from django.db.models import Sum, TextField
from django.db.models.functions import Cast, Length

from runs.models import Artifact, Checkpoint, Event, Message, Operation, Payload, Run, Step

CACHE_SECONDS = 60
_CACHE_KEY = "agentops:storage-by-workflow"

#: (model, path from the model to the run, text-sized fields).
_SOURCES = [
    (Run, "", ["input"]),
    (Step, "run__", ["input", "output"]),
    (Checkpoint, "run__", ["data"]),
    (Operation, "run__", ["arguments", "result"]),
    (Event, "run__", ["payload"]),
    (Message, "run__", ["content"]),
    (Payload, "run__", ["text"]),
]


def _text_size(field: str):
    return Length(Cast(field, output_field=TextField()))


def storage_by_workflow(use_cache: bool = True) -> list[dict]:
    """``[{workflow, db_bytes, payload_bytes, artifact_bytes}]`` sorted by workflow."""
    if use_cache:
        cached = cache.get(_CACHE_KEY)
        if cached is not None:
            return cached
    rows: dict[str, dict] = {}

    def row(workflow: str) -> dict:
        return rows.setdefault(
            workflow,
            {"workflow": workflow, "db_bytes": 0, "payload_bytes": 0, "artifact_bytes": 0},
        )

    for model, to_run, fields in _SOURCES:
        # Raw column sizes: values_list() would resolve payload references.
        sizes = {f"s{i}": Sum(_text_size(name)) for i, name in enumerate(fields)}
        for item in (
            model._default_manager.filter(**{f"{to_run}workflow__isnull": False})
            .values(f"{to_run}workflow")
            .annotate(**sizes)
            .order_by()
        ):
            row(item[f"{to_run}workflow"])["db_bytes"] += sum(item[key] or 0 for key in sizes)
    for item in Payload.objects.values("run__workflow").annotate(n=Sum("size")).order_by():
        row(item["run__workflow"])["payload_bytes"] += item["n"] or 0
    for item in Artifact.objects.values("run__workflow").annotate(n=Sum("size")).order_by():
        row(item["run__workflow"])["artifact_bytes"] += item["n"] or 0
    result = [rows[name] for name in sorted(rows)]
    cache.set(_CACHE_KEY, result, CACHE_SECONDS)
    return result
