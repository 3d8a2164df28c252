"""Server-rendered SVG pictures of the console: the geometry (pixel coordinates, ticks,
labels) computed here, the SVG written by templates (``partials/chart_*.html``) with
Django's autoescaping, so no JavaScript and no charting library is needed.

Every picture is readable without colour: series differ by dash pattern and marker
shape and are labelled in text; failures carry a cross and a hatch pattern; waits are
dashed and named. Every picture has a text equivalent: its SVG ``<title>``/``<desc>``
and a table of the same numbers (``table``).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from runs.console.attempts import ENDINGS, Attempt, attempts_by_step
from runs.engine.service import branch_counts
from runs.models import Event, Run, Step

#: Dash patterns and marker shapes, in series order (readable without colour).
DASHES = ["", "6 3", "2 3", "10 4 2 4", "1 5", "8 2 2 2 2 2"]
MARKERS = ["circle", "square", "triangle", "diamond", "cross", "bar"]
#: Colours for those who see them; never the only difference between series.
COLOURS = ["#1f5f8b", "#b35900", "#2e7d32", "#6a1b9a", "#8b1a1a", "#455a64"]


@dataclass
class Table:
    """The text equivalent of a picture: a caption, column headers and rows of text."""

    caption: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values spanning ``low..high``."""
    span = max(high - low, 1e-9)
    raw = span / count
    magnitude = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1
    step = next((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), 10 * magnitude)
    first = (low // step) * step
    values = []
    value = first
    while value <= high + 1e-9:
        if value >= low - 1e-9:
            values.append(round(value, 6))
        value += step
    return values


def _seconds(delta: timedelta) -> float:
    return delta.total_seconds()


def _fmt_s(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# -- line and bar charts over time --------------------------------------------------


@dataclass
class Series:
    """One line (or one kind of bar): ``points`` ``[(x, y)]`` in pixels, ``svg_points``
    for ``<polyline>``, its ``dash``, ``marker`` and ``colour``, and the vertical place
    of its entry in the legend."""

    name: str
    values: list[float]
    points: list[tuple[float, float]] = field(default_factory=list)
    dash: str = ""
    marker: str = "circle"
    colour: str = COLOURS[0]
    legend_y: float = 0.0

    @property
    def svg_points(self) -> str:
        return " ".join(f"{x:.1f},{y:.1f}" for x, y in self.points)

    #: Draw a marker on every n-th point (and the last), enough to tell lines apart.
    marker_every: int = 1

    @property
    def marker_path(self) -> str:
        """One SVG path drawing this series' marker on every ``marker_every``-th point."""
        last = len(self.points) - 1
        return " ".join(
            marker_d(self.marker, x, y)
            for i, (x, y) in enumerate(self.points)
            if i % self.marker_every == 0 or i == last
        )

    @property
    def legend_marker(self) -> str:
        """The marker drawn in the middle of this series' legend sample."""
        return marker_d(self.marker, 11, self.legend_y + 5)

    @property
    def legend_line_y(self) -> float:
        return self.legend_y + 5


def marker_d(shape: str, x: float, y: float, r: float = 3.0) -> str:
    """SVG path data of a marker ``shape`` (one of ``MARKERS``) centred on ``(x, y)``."""
    if shape == "square":
        return f"M{x - r:.1f},{y - r:.1f}h{2 * r}v{2 * r}h{-2 * r}z"
    if shape == "triangle":
        return f"M{x:.1f},{y - r - 1:.1f}l{r + 1},{2 * r + 1}h{-2 * r - 2}z"
    if shape == "diamond":
        return f"M{x:.1f},{y - r - 1:.1f}l{r + 1},{r + 1}l{-r - 1},{r + 1}l{-r - 1},{-r - 1}z"
    if shape == "cross":
        return f"M{x - r:.1f},{y - r:.1f}l{2 * r},{2 * r}m0,{-2 * r}l{-2 * r},{2 * r}"
    if shape == "bar":
        return f"M{x - r:.1f},{y:.1f}h{2 * r}M{x:.1f},{y - r:.1f}v{2 * r}"
    return f"M{x - r:.1f},{y:.1f}a{r},{r} 0 1,0 {2 * r},0a{r},{r} 0 1,0 {-2 * r},0"


@dataclass
class Chart:
    """A time chart: ``kind`` ``"line"`` or ``"bars"``, pixel size, plot box
    (``left``, ``top``, ``plot_w``, ``plot_h``), ``x_ticks``/``y_ticks`` ``[(pixel,
    label)]``, the ``series`` (lines) or ``bars`` (``[{x, y, w, h, series, value}]``),
    ``title``/``desc`` for the SVG and the ``table`` text equivalent."""

    id: str
    kind: str
    title: str
    desc: str
    table: Table
    width: int = 900
    height: int = 260
    left: int = 56
    top: int = 22
    right: int = 175
    bottom: int = 40
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)
    bars: list[dict[str, Any]] = field(default_factory=list)
    y_label: str = ""
    empty: bool = False

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom

    @property
    def bottom_y(self) -> float:
        return self.top + self.plot_h

    @property
    def plot_right(self) -> float:
        return self.left + self.plot_w

    @property
    def legend_x(self) -> float:
        return self.plot_right + 12


def time_chart(
    bucketed: tuple[list[datetime], Mapping[str, Sequence[float]]],
    *,
    id: str,
    kind: str,
    title: str,
    y_label: str,
    tick_every: int,
    summary: str = "total",
) -> Chart:
    """Lay out ``bucketed``, ``(starts, {name: [value per bucket]})`` as the ``runs.stats``
    series functions return them (evenly spaced bucket starts, at least two), as a line
    chart or grouped bars; x ticks every ``tick_every`` buckets, labelled in UTC
    ``HH:MM``. The description sums each series (``summary="total"``, for counts per
    bucket) or gives its last value (``"latest"``, for levels such as open runs).
    Raises ``ValueError`` for fewer than two buckets (their length is unknown)."""
    starts, series = bucketed
    if len(starts) < 2:
        raise ValueError(f"a time chart needs at least two buckets, got {len(starts)}")
    step = starts[1] - starts[0]
    names = list(series)
    buckets = len(starts)
    top_value = max([max(v, default=0) for v in series.values()] + [0])
    table = Table(
        caption=f"{title} (times in UTC, each row {int(step.total_seconds() // 60)} minutes)",
        headers=["from", *names],
        rows=[
            [starts[i].strftime("%H:%M"), *(_num(series[n][i]) for n in names)]
            for i in range(buckets)
        ],
    )
    if summary == "latest":
        totals = "Now: " + ", ".join(
            f"{n}: {_num(series[n][-1] if series[n] else 0)}" for n in names
        )
    else:
        totals = "Totals: " + ", ".join(f"{n}: {_num(sum(series[n]))}" for n in names)
    chart = Chart(
        id=id,
        kind=kind,
        title=title,
        desc=f"{title}, {buckets} buckets from {starts[0]:%H:%M} UTC. {totals}."
        if buckets
        else title,
        table=table,
        y_label=y_label,
        empty=top_value == 0,
    )
    y_max = max(_ticks(0, max(top_value, 1))[-1], top_value, 1)
    slot = chart.plot_w / max(buckets, 1)

    def y_of(value: float) -> float:
        return chart.bottom_y - chart.plot_h * value / y_max

    chart.y_ticks = [(round(y_of(v), 1), _num(v)) for v in _ticks(0, y_max) if v <= y_max]
    chart.x_ticks = [
        (round(chart.left + i * slot, 1), starts[i].strftime("%H:%M"))
        for i in range(0, buckets, tick_every)
    ]
    for index, name in enumerate(names):
        values = series[name]
        line = Series(
            name=name,
            values=list(values),
            dash=DASHES[index % len(DASHES)],
            marker=MARKERS[index % len(MARKERS)],
            colour=COLOURS[index % len(COLOURS)],
            legend_y=chart.top + 6 + 18 * index,
        )
        if kind == "bars":
            width = slot / (len(names) + 0.5)
            for i, value in enumerate(values):
                if value:
                    chart.bars.append(
                        {
                            "x": round(chart.left + i * slot + index * width, 1),
                            "y": round(y_of(value), 1),
                            "w": round(max(width - 0.5, 0.5), 1),
                            "h": round(chart.bottom_y - y_of(value), 1),
                            "series": index,
                            "title": f"{name} {starts[i]:%H:%M}: {_num(value)}",
                        }
                    )
        else:
            line.points = [
                (round(chart.left + (i + 0.5) * slot, 1), round(y_of(v), 1))
                for i, v in enumerate(values)
            ]
            line.marker_every = max(tick_every // 2, 1)
        chart.series.append(line)
    return chart


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


# -- the run timeline -------------------------------------------------------------------

#: The text mark after an attempt, by outcome: the picture never relies on colour.
MARKS = {"succeeded": "✓", "failed": "✕", "interrupted": "!", "asked": "?"}
#: Events that end a step's wait, named in the wait's label: an approval's decision, or
#: a map step's join once every branch finished.
DECISIONS = (
    "approval.approved",
    "approval.rejected",
    "approval.expired",
    "approval.cancelled",
    "step.joined",
)
#: Most events and steps of one run the timeline reads and draws (a very long run, a
#: loop of thousands of iterations, shows its beginning; the page stays small and fast).
TIMELINE_EVENT_LIMIT = 2000
TIMELINE_STEP_LIMIT = 100


def _bar(x1: float, x2: float, outcome: str, title: str) -> dict:
    """One bar of a timeline row from pixel ``x1`` to ``x2`` (at least 2 px wide), drawn
    as ``outcome`` with its mark (``MARKS``) just after its end; ``title`` is its
    tooltip."""
    return {
        "x": x1,
        "w": round(max(x2 - x1, 2.0), 1),
        "outcome": outcome,
        "mark": MARKS.get(outcome, "…"),
        "mark_x": round(max(x2, x1 + 2.0) + 3, 1),
        "title": title,
    }


@dataclass
class Timeline:
    """The run timeline: ``rows`` (one per step: ``{label, y, bars, waits}``; bars are
    ``{x, w, outcome, mark, title}``, waits ``{x1, x2, y, label, title}``),
    ``run_waits`` (takeovers, on the top row), ``x_ticks`` ``[(pixel, label)]``, pixel
    ``width``/``height``, ``title``/``desc`` and the ``table`` text equivalent."""

    title: str
    desc: str
    table: Table
    rows: list[dict[str, Any]] = field(default_factory=list)
    run_waits: list[dict[str, Any]] = field(default_factory=list)
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    width: int = 900
    height: int = 80
    left: int = 190
    right: int = 30
    row_h: int = 28
    top: int = 34
    empty: bool = False

    @property
    def axis_y(self) -> float:
        return self.height - 26

    @property
    def plot_right(self) -> float:
        return self.width - self.right

    @property
    def band_h(self) -> float:
        return self.axis_y - self.top + 10


def run_timeline(run: Run, now: datetime) -> Timeline:
    """The steps and attempts of ``run`` on a time axis from its creation to its end
    (or ``now``), with waits (retry backoff, approval, takeover, lease expiry) as named
    dashed gaps and failures marked. Reads the run's events in one query."""
    events = list(
        Event.objects.filter(run=run)
        .order_by("seq")
        .only("type", "step_id", "payload", "created_at", "actor")[:TIMELINE_EVENT_LIMIT]
    )
    # A map step's branches (there may be 10,000) are one row with counts, not a row each.
    steps = list(
        Step.objects.filter(run=run, branch_of__isnull=True)
        .order_by("seq")
        .values("pk", "name", "seq", "generation")[:TIMELINE_STEP_LIMIT]
    )
    start = run.created_at
    end = run.finished_at or now
    if events:
        end = max(end, events[-1].created_at)
    span = max(_seconds(end - start), 1.0)
    table = Table(
        caption=f"Steps, attempts and waits of run {run.pk} (seconds after it was created)",
        headers=["step", "what", "from (s)", "to (s)", "lasted", "outcome"],
    )
    timeline = Timeline(title=f"Timeline of run {str(run.pk)[:8]}", desc="", table=table)
    plot_w = timeline.width - timeline.left - timeline.right

    def x_of(moment: datetime) -> float:
        offset = min(max(_seconds(moment - start), 0.0), span)
        return round(timeline.left + plot_w * offset / span, 1)

    attempts = attempts_by_step(events)
    counts = branch_counts(run.pk)
    branch_attempts: dict[int, list[Attempt]] = {}
    if attempts:
        for pk, parent_id in Step.objects.filter(
            pk__in=list(attempts), branch_of__isnull=False
        ).values_list("pk", "branch_of_id"):
            branch_attempts.setdefault(parent_id, []).extend(attempts[pk])
    waits: dict[int, list[dict[str, Any]]] = {}
    open_wait: dict[int, dict[str, Any]] = {}
    run_waits: list[dict[str, Any]] = []
    takeover_open: datetime | None = None
    for event in events:
        type_, step_id, at = event.type, event.step_id, event.created_at
        payload = event.payload if isinstance(event.payload, dict) else {}
        if type_ == "takeover.opened":
            takeover_open = at
        elif type_ == "takeover.resolved" and takeover_open is not None:
            run_waits.append({"start": takeover_open, "end": at, "label": "takeover"})
            takeover_open = None
        if step_id is None:
            continue
        if type_ == "step.waiting":
            # The attempt's work is done: it asked and released its lease; the wait follows.
            open_wait[step_id] = {"start": at, "label": str(payload.get("waiting_for") or "wait")}
            continue
        if step_id in open_wait and (type_ in DECISIONS or type_ in ENDINGS):
            wait = open_wait.pop(step_id)
            decided = type_.split(".", 1)[1] if type_ in DECISIONS else ""
            label = f"{wait['label']} ({decided})" if decided else wait["label"]
            waits.setdefault(step_id, []).append({**wait, "label": label, "end": at})
    if takeover_open is not None:
        run_waits.append({"start": takeover_open, "end": end, "label": "takeover (open)"})
    for step_id, wait in open_wait.items():
        waits.setdefault(step_id, []).append(
            {**wait, "end": end, "label": wait["label"] + " (open)"}
        )

    y = timeline.top
    for step in steps:
        label = f"{step['seq']}. {step['name']}" + (
            f" (gen {step['generation']})" if step["generation"] > 1 else ""
        )
        row = _empty_row(label, y, timeline)
        previous: Attempt | None = None
        for attempt in attempts.get(step["pk"], []):
            begin = attempt.started_at
            if begin is None:
                continue
            finish = attempt.ended_at or end
            ending = ENDINGS.get(attempt.ended_by)
            outcome = ending.drawn if ending else "running"
            lasted = _seconds(finish - begin)
            row["bars"].append(
                _bar(
                    x_of(begin),
                    x_of(finish),
                    outcome,
                    f"{step['name']} attempt {attempt.number}: {attempt.outcome}, {_fmt_s(lasted)}",
                )
            )
            table.rows.append(
                _table_row(step["name"], f"attempt {attempt.number}", begin, finish, start, outcome)
            )
            if previous is not None and previous.ended_at and begin > previous.ended_at:
                previous_ending = ENDINGS.get(previous.ended_by)
                cause = previous_ending.wait_after if previous_ending else "wait"
                if any(w["start"] <= begin and w["end"] >= previous.ended_at for w in run_waits):
                    cause = "takeover"
                _add_wait(row, table, step["name"], previous.ended_at, begin, cause, start, x_of)
            previous = attempt
        for wait in waits.get(step["pk"], []):
            _add_wait(
                row, table, step["name"], wait["start"], wait["end"], wait["label"], start, x_of
            )
        timeline.rows.append(row)
        y += timeline.row_h
        if step["pk"] in counts:
            timeline.rows.append(
                _branches_row(
                    timeline, y, step["name"], counts[step["pk"]],
                    branch_attempts.get(step["pk"], []), start, end, x_of,
                )
            )  # fmt: skip
            y += timeline.row_h
    for wait in run_waits:
        x1 = x_of(wait["start"])
        timeline.run_waits.append(
            {
                "x1": x1,
                "w": round(max(x_of(wait["end"]) - x1, 2), 1),
                "label": wait["label"],
                "title": f"run: {wait['label']} for "
                f"{_fmt_s(_seconds(wait['end'] - wait['start']))}",
            }
        )
        table.rows.append(
            _table_row("(run)", wait["label"], wait["start"], wait["end"], start, "waiting")
        )
    timeline.height = y + 30
    timeline.x_ticks = [
        (round(timeline.left + plot_w * v / span, 1), f"+{_fmt_s(v)}") for v in _ticks(0, span)
    ]
    timeline.empty = not any(r["bars"] for r in timeline.rows)
    failed = sum(1 for r in timeline.rows for b in r["bars"] if b["outcome"] == "failed")
    wait_count = sum(len(r["waits"]) for r in timeline.rows) + len(timeline.run_waits)
    timeline.desc = (
        f"{len(steps)} steps, {sum(len(r['bars']) for r in timeline.rows)} attempts "
        f"({failed} failed), {wait_count} waits over {_fmt_s(span)} from "
        f"{start:%Y-%m-%d %H:%M:%S} UTC."
    )
    return timeline


def _add_wait(row, table: Table, step: str, begin, finish, label: str, origin, x_of) -> None:
    lasted = _seconds(finish - begin)
    row["waits"].append(
        {
            "x1": x_of(begin),
            "x2": max(x_of(finish), x_of(begin) + 2),
            "label": label,
            "title": f"{step}: {label} for {_fmt_s(lasted)}",
        }
    )
    table.rows.append(_table_row(step, f"wait: {label}", begin, finish, origin, "waiting"))


def _empty_row(label: str, y: float, timeline: Timeline) -> dict[str, Any]:
    """A timeline row at ``y`` (px) with no bars or waits yet: the geometry every row
    shares."""
    return {
        "label": label,
        "y": y,
        "bar_y": y + 5,
        "bar_h": timeline.row_h - 10,
        "text_y": y + timeline.row_h / 2 + 4,
        "wait_y": y + timeline.row_h / 2,
        "wait_text_y": y + 5,
        "bars": [],
        "waits": [],
    }


def _branches_row(
    timeline: Timeline,
    y: float,
    name: str,
    counts: dict[str, int],
    attempts: list[Attempt],
    origin: datetime,
    end: datetime,
    x_of,
) -> dict[str, Any]:
    """One timeline row for all branches of the map step ``name``: labelled with their
    count by status (``counts``: ``{status: branches}``), one bar from the first branch
    attempt's start to the last one's end among ``attempts`` (those the timeline's
    events show), failed when any branch failed, running while any is unsettled."""
    shown = ", ".join(f"{status} {n}" for status, n in sorted(counts.items()))
    what = f"{sum(counts.values())} branches: {shown}"
    row = _empty_row(f"  {name}: {what}", y, timeline)
    begins = [a.started_at for a in attempts if a.started_at is not None]
    if not begins:
        return row
    begin = min(begins)
    finish = max(a.ended_at or end for a in attempts if a.started_at is not None)
    if counts.get("FAILED"):
        outcome = "failed"
    elif any(status in counts for status in ("PENDING", "RUNNING", "WAITING")):
        outcome = "running"
    else:
        outcome = "succeeded"
    row["bars"].append(
        _bar(
            x_of(begin), x_of(finish), outcome, f"{name} {what}, {_fmt_s(_seconds(finish - begin))}"
        )
    )
    timeline.table.rows.append(_table_row(name, what, begin, finish, origin, outcome))
    return row


def _table_row(
    who: str, what: str, begin: datetime, finish: datetime, origin: datetime, outcome: str
) -> list[str]:
    """One row of the timeline's table: ``[who, what, from, to, lasted, outcome]``,
    ``from``/``to`` in seconds after ``origin`` (the run's creation) with one decimal,
    ``lasted`` as ``_fmt_s`` writes it."""
    return [
        who,
        what,
        f"{_seconds(begin - origin):.1f}",
        f"{_seconds(finish - origin):.1f}",
        _fmt_s(_seconds(finish - begin)),
        outcome,
    ]


# -- the pictures of the overview and the workers page ---------------------------------


def overview_charts(now: datetime) -> list[Chart]:
    """The overview's two pictures: steps succeeded and failed per 5 minutes, and open
    runs by state, over the last 6 hours."""
    from runs.stats import open_runs_series, step_outcome_series

    return [
        time_chart(
            step_outcome_series(now),
            id="chart-step-outcomes",
            kind="bars",
            title="Steps succeeded and failed per 5 minutes, last 6 hours",
            y_label="steps",
            tick_every=12,
        ),
        time_chart(
            open_runs_series(now),
            id="chart-open-runs",
            kind="line",
            title="Open runs by state, last 6 hours",
            y_label="runs",
            tick_every=12,
            summary="latest",
        ),
    ]


def workers_chart(now: datetime) -> Chart:
    """The workers page's picture: step attempts finished per minute per worker over
    the last 30 minutes."""
    from runs.stats import worker_steps_series

    return time_chart(
        worker_steps_series(now),
        id="chart-worker-steps",
        kind="line",
        title="Steps finished per minute per worker, last 30 minutes",
        y_label="steps/min",
        tick_every=5,
    )
