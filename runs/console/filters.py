"""django-filter filter sets of the console's lists (runs, audit log)."""

import django_filters as df
from django import forms
from django.db.models import Exists, OuterRef, Q

from runs.engine.service import id_prefix_q, is_id_prefix
from runs.models import Approval, Event, Run, Step, Takeover
from runs.states import RunStatus, StepStatus
from runs.stats import NON_TERMINAL_STATES, stuck_q


class AnyYesNo(forms.NullBooleanSelect):
    """A yes/no filter's select: "any" (no filter), "yes" or "no"; the values stay
    ``unknown``/``true``/``false`` as Django's ``NullBooleanSelect`` reads them."""

    def __init__(self, attrs=None):
        super().__init__(attrs)
        self.choices = [("unknown", "any"), ("true", "yes"), ("false", "no")]


def status_filter(field_name: str, label: str) -> df.MultipleChoiceFilter:
    """A filter by run state, shown as one checkbox per state (none ticked: any)."""
    return df.MultipleChoiceFilter(
        field_name=field_name,
        choices=RunStatus.choices,
        label=label,
        widget=forms.CheckboxSelectMultiple(attrs={"class": "chips"}),
    )


class TimeRangeWidget(df.widgets.DateRangeWidget):
    """Two ``datetime-local`` inputs (``_after``, ``_before``), each labelled for
    screen readers by the filter's label and "from" / "to"."""

    def __init__(self, label: str):
        super().__init__()
        self.widgets = [
            forms.DateTimeInput(
                attrs={"type": "datetime-local", "aria-label": f"{label}: {end}"},
                format="%Y-%m-%dT%H:%M",
            )
            for end in ("from", "to")
        ]


def time_range_filter(field_name: str, label: str) -> df.DateTimeFromToRangeFilter:
    """A from/to filter on a time column, with the browser's ``datetime-local`` inputs
    (read in the server's time zone, UTC); ``?{name}_after=``/``_before=`` take ISO
    times or dates."""
    return df.DateTimeFromToRangeFilter(
        field_name=field_name, label=f"{label} (from, to; UTC)", widget=TimeRangeWidget(label)
    )


def yes_no_filter(**kwargs) -> df.BooleanFilter:
    """A yes/no filter whose unset value reads "any"."""
    return df.BooleanFilter(widget=AnyYesNo, **kwargs)


def unknown_step_exists():
    """``Exists`` of an UNKNOWN step in the outer run (annotation and filter)."""
    return Exists(Step.objects.filter(run=OuterRef("pk"), status=StepStatus.UNKNOWN))


class UniqueOrderingFilter(df.OrderingFilter):
    """``OrderingFilter`` whose result always ends with the primary key, in the direction
    of the last sort field: rows that tie on the chosen field (400 runs share 9 statuses)
    keep one order across the queries of a paginator, so walking the pages shows each
    row exactly once. Applies to the queryset's default ordering too."""

    def filter(self, qs, value):
        return with_tie_breaker(super().filter(qs, value))


def with_tie_breaker(qs):
    """``qs`` ordered as before, then by primary key (descending when the last ordering
    field is); unchanged when it is unordered or already ends with the primary key."""
    ordering = [str(o) for o in qs.query.order_by]
    if not ordering or ordering[-1].lstrip("-") in ("pk", "id"):
        return qs
    return qs.order_by(*qs.query.order_by, "-pk" if ordering[-1].startswith("-") else "pk")


class RunFilter(df.FilterSet):
    """Filters of the runs list. ``now`` (database time) decides "stuck"."""

    q = df.CharFilter(method="filter_text", label="Run id, thread id or goal")
    status = status_filter("status", "State")
    workflow = df.CharFilter()
    workflow_version = df.NumberFilter(label="Version")
    owner = df.CharFilter(field_name="owner__username", label="Owner")
    thread = df.CharFilter(field_name="thread__thread_id", label="Thread id")
    created = time_range_filter("created_at", "Created")
    updated = time_range_filter("updated_at", "Updated")
    stuck = yes_no_filter(method="filter_stuck", label="Stuck")
    has_unknown = yes_no_filter(method="filter_unknown", label="Has unknown outcome")
    is_replay = yes_no_filter(
        field_name="replay_of", lookup_expr="isnull", exclude=True, label="Is a replay"
    )
    was_replayed = yes_no_filter(method="filter_replayed", label="Was replayed")
    parent = df.CharFilter(method="filter_parent", label="Parent run id")
    o = UniqueOrderingFilter(
        fields=(
            ("created_at", "created"),
            ("updated_at", "updated"),
            ("status", "status"),
            ("workflow", "workflow"),
            ("last_event_at", "last_event"),
        ),
        label="Sort",
    )

    class Meta:
        model = Run
        fields: list[str] = []

    def __init__(self, *args, now=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.now = now

    def filter_text(self, queryset, name, value):
        value = value.strip()
        if not value:
            return queryset
        match = Q(thread__thread_id__icontains=value) | Q(goal__icontains=value)
        if is_id_prefix(value):
            match |= id_prefix_q("id", value)
        return queryset.filter(match)

    def filter_stuck(self, queryset, name, value):
        if value is None:
            return queryset
        condition = stuck_q(self.now)
        return queryset.filter(condition) if value else queryset.exclude(condition)

    def filter_unknown(self, queryset, name, value):
        if value is None:
            return queryset
        exists = unknown_step_exists()
        return queryset.filter(exists) if value else queryset.filter(~exists)

    def filter_parent(self, queryset, name, value):
        """The child runs of the run whose id is ``value`` (whole or a prefix)."""
        value = value.strip().lower()
        if not value:
            return queryset
        if not is_id_prefix(value):
            return queryset.none()
        return queryset.filter(id_prefix_q("parent_run__id", value))

    def filter_replayed(self, queryset, name, value):
        if value is None:
            return queryset
        exists = Exists(Run.objects.filter(replay_of=OuterRef("pk")))
        return queryset.filter(exists) if value else queryset.filter(~exists)


class RunRelatedFilter(df.FilterSet):
    """The runs list's filters for rows that belong to a run (approvals, takeovers,
    unknown outcomes): the run's id (whole or a prefix), id/thread/goal text, state,
    workflow, owner and thread, and when the row was created."""

    run = df.CharFilter(method="filter_run", label="Run id")
    q = df.CharFilter(method="filter_text", label="Run id, thread id or goal")
    run_status = status_filter("run__status", "Run state")
    workflow = df.CharFilter(field_name="run__workflow", label="Workflow")
    owner = df.CharFilter(field_name="run__owner__username", label="Owner")
    thread = df.CharFilter(field_name="run__thread__thread_id", label="Thread id")
    created = time_range_filter("created_at", "Created")

    def filter_run(self, queryset, name, value):
        value = value.strip().lower()
        if not value:
            return queryset
        if not is_id_prefix(value):
            return queryset.none()
        return queryset.filter(id_prefix_q("run__id", value))

    def filter_text(self, queryset, name, value):
        value = value.strip()
        if not value:
            return queryset
        match = Q(run__thread__thread_id__icontains=value) | Q(run__goal__icontains=value)
        if is_id_prefix(value):
            match |= id_prefix_q("run__id", value)
        return queryset.filter(match)


class ApprovalFilter(RunRelatedFilter):
    """Filters of the approvals inbox."""

    class Meta:
        model = Approval
        fields: list[str] = []


class TakeoverFilter(RunRelatedFilter):
    """Filters of the takeover desk: the run's, plus the takeover's cause."""

    cause = df.ChoiceFilter(choices=Takeover.Cause.choices, label="Cause")

    class Meta:
        model = Takeover
        fields: list[str] = []


class UnknownFilter(RunRelatedFilter):
    """Filters of the unknown outcomes list: the run's, plus the step name."""

    step = df.CharFilter(field_name="name", label="Step")

    class Meta:
        model = Step
        fields: list[str] = []


class AuditFilter(df.FilterSet):
    """Filters of the audit log: by person (actor), action (event type) and run."""

    user = df.CharFilter(method="filter_user", label="User")
    action = df.CharFilter(field_name="type", label="Action (event type)")
    run = df.CharFilter(method="filter_run", label="Run id")

    class Meta:
        model = Event
        fields: list[str] = []

    def filter_user(self, queryset, name, value):
        value = value.strip()
        if not value:
            return queryset
        return queryset.filter(actor=value if ":" in value or value == "cli" else f"user:{value}")

    def filter_run(self, queryset, name, value):
        value = value.strip().lower()
        if not is_id_prefix(value):
            return queryset.none()
        return queryset.filter(id_prefix_q("run__id", value))


__all__ = [
    "RunFilter",
    "AuditFilter",
    "UniqueOrderingFilter",
    "with_tie_breaker",
    "NON_TERMINAL_STATES",
    "unknown_step_exists",
]
