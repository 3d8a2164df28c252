"""Template helpers of the console. Nothing here marks anything safe: agent, model and
tool output is untrusted, so every value reaches the page through autoescaping."""

import json
from datetime import UTC, datetime, timedelta

from django import template
from django.utils import timezone

from runs.cli.terminal import terminal_text
from runs.console.access import form_version

register = template.Library()

#: Characters of a payload shown before the "show all" fold.
PREVIEW_CHARS = 240
#: Most characters of one payload the fold itself holds; the rest is behind a link.
FOLD_CHARS = 4096


@register.filter
def visible(value) -> str:
    """``value`` as text with every character that acts on how text reads written as
    its ``\\uXXXX`` escape (``terminal_text``: ESC and other controls, U+202E and the
    other bidirectional controls, which would reorder what the operator sees); newlines
    and tabs are kept. Autoescaping still applies after it."""
    if value is None:
        return ""
    return terminal_text(value, newlines=True, tabs=True)


def _as_text(value, indent: int | None = None) -> str:
    """``value`` (text or JSON) as text, not yet escaped: a JSON value as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=indent, sort_keys=True, default=str, ensure_ascii=False)


@register.inclusion_tag("partials/payload.html")
def payload(value, limit: int = PREVIEW_CHARS, full_url: str = ""):
    """Render ``value`` (text or JSON) escaped (``visible``); a JSON value's escapes
    are JSON's own, so the text still reads as the same JSON. Longer than ``limit``
    characters, as a preview with a ``<details>`` fold (no JavaScript needed) holding
    the text up to ``FOLD_CHARS``; beyond that the fold is cut and links to
    ``full_url`` (the whole value as plain text), so one large tool output cannot make
    the page huge. ``size`` counts the value's characters before escaping."""
    text = _as_text(value)
    long = len(text) > limit
    # Only what is shown is escaped (escaping only lengthens text), so a tool output
    # of megabytes costs the page little.
    fold = visible((_as_text(value, indent=2) if long else text)[: FOLD_CHARS + 1])
    return {
        "text": fold[:FOLD_CHARS],
        "cut": len(fold) > FOLD_CHARS,
        "full_url": full_url,
        "preview": visible(text[:limit])[:limit],
        "long": long,
        "size": len(text),
    }


@register.filter(name="form_version")
def form_version_filter(run) -> str:
    """The run's ``run_version`` for a form (``runs.console.access.form_version``)."""
    return form_version(run)


@register.filter
def duration(seconds) -> str:
    """``3725.2`` -> ``"1h 2m"``; ``None`` -> ``"-"``."""
    if seconds is None or seconds == "":
        return "-"
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    seconds = float(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes}m"
    return f"{hours // 24}d {hours % 24}h"


@register.filter
def age(moment: datetime | None) -> str:
    """Time since ``moment`` as a ``duration``; ``"-"`` when unset."""
    if not moment:
        return "-"
    return duration((timezone.now() - moment).total_seconds())


@register.filter
def percent(ratio) -> str:
    """``0.1234`` -> ``"12.3%"``; ``None`` -> ``"-"``."""
    return "-" if ratio is None else f"{float(ratio) * 100:.1f}%"


@register.filter
def shortid(value) -> str:
    """The first 8 characters of a run id, as shown in lists."""
    return str(value)[:8]


@register.filter
def getitem(mapping, key):
    """``mapping[key]`` or ``None``."""
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.simple_tag(takes_context=True)
def query_with(context, **changes) -> str:
    """The current query string with ``changes`` applied (``None`` removes a key); for
    sort links and pagination that keep the filters."""
    params = context["request"].GET.copy()
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    return params.urlencode()


@register.simple_tag(takes_context=True)
def query_with_page(context, param: str, number) -> str:
    """The current query string with page parameter ``param`` set to ``number`` (the
    pager of a list whose page parameter is not ``page``)."""
    params = context["request"].GET.copy()
    params[param] = number
    return params.urlencode()


def _parse_time(value) -> datetime | None:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    return value if isinstance(value, datetime) else None


def human_time(value, now: datetime | None = None) -> str:
    """``datetime`` (or ISO text) -> ``"30 Nov 2026 12:49:14 UTC (3 min ago)"``; the
    relative part for the last week only, ``"in 20 s"`` for future times. ``""`` for
    ``None`` or text that is not a time."""
    when = _parse_time(value)
    if when is None:
        return ""
    if timezone.is_naive(when):
        when = timezone.make_aware(when, UTC)
    when = when.astimezone(UTC)
    text = f"{when.day} {when:%b %Y %H:%M:%S} UTC"
    seconds = ((now or timezone.now()) - when).total_seconds()
    if abs(seconds) > 7 * 86400:
        return text
    span = duration(abs(seconds)) if abs(seconds) >= 1 else "now"
    if span == "now":
        return f"{text} (just now)"
    return f"{text} ({span} ago)" if seconds >= 0 else f"{text} (in {span})"


@register.inclusion_tag("partials/when.html")
def when(value, empty: str = "-"):
    """A time for people, with the exact ISO value as the ``title`` and ``datetime`` of a
    ``<time>`` element: ``{% when run.created_at %}``; ``empty`` when there is none."""
    moment = _parse_time(value)
    return {
        "iso": moment.isoformat() if moment else "",
        "text": human_time(moment) if moment else empty,
    }


@register.filter
def sum_values(values) -> int:
    """The sum of an iterable of numbers (a dict's ``.values``), 0 when empty."""
    return sum(values or ())
