"""The steps after a checkpoint as the resume and replay previews list them.

A map step may have 10,000 branches: they are listed as one row per map step with
counts by status (``fetch#2..10001 (10000 branches: PENDING 6666, SUCCEEDED 3334)``),
in a fixed number of grouped queries, never one row per branch.
"""

from typing import Any

from django.db.models import Count, Max, Min, QuerySet

from runs.models import Step


def branch_groups(steps: QuerySet[Step]) -> list[dict[str, Any]]:
    """``[{"branch_of_id", "name", "generation", "count", "first_seq", "last_seq"}]``:
    the branches among ``steps``, one row per map step, in one grouped query."""
    return [
        dict(group)
        for group in steps.filter(branch_of__isnull=False)
        .values("branch_of_id", "name", "generation")
        .annotate(count=Count("pk"), first_seq=Min("seq"), last_seq=Max("seq"))
        .order_by("first_seq")
    ]


def listing(steps: QuerySet[Step]) -> list[dict[str, Any]]:
    """``steps`` in seq order, in three queries whatever the branch count: per step
    ``{"name", "seq", "generation", "status", "error_code", "label"}``
    (``label``: ``work#3 (FAILED, PERMISSION_DENIED)``), per map step's branches
    ``{"name", "seq", "last_seq", "generation", "status": None, "error_code": None,
    "branches": {status: count}, "label"}`` (``work#4..8 (5 branches: SUCCEEDED 5)``)."""
    rows = [
        {
            "name": s.name,
            "seq": s.seq,
            "generation": s.generation,
            "status": s.status,
            "error_code": s.error_code,
            "label": f"{s.name}#{s.seq} ({s.status}"
            + (f", {s.error_code})" if s.error_code else ")"),
        }
        for s in steps.filter(branch_of__isnull=True).order_by("seq")
    ]
    counts: dict[int, dict[str, int]] = {}
    for parent_id, status, n in (
        steps.filter(branch_of__isnull=False)
        .values_list("branch_of_id", "status")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        counts.setdefault(parent_id, {})[status] = n
    for group in branch_groups(steps):
        branches = counts.get(group["branch_of_id"], {})
        shown = ", ".join(f"{status} {n}" for status, n in sorted(branches.items()))
        rows.append(
            {
                "name": group["name"],
                "seq": group["first_seq"],
                "last_seq": group["last_seq"],
                "generation": group["generation"],
                "status": None,
                "error_code": None,
                "branches": branches,
                "label": f"{group['name']}#{group['first_seq']}..{group['last_seq']} "
                f"({group['count']} branches: {shown})",
            }
        )
    return sorted(rows, key=lambda row: row["seq"])
