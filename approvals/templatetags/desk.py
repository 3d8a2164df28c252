"""Template tags of the operator desk: stored values (a takeover's facts, evidence,
parameters) laid out for people instead of shown as raw JSON."""

import json

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

register = template.Library()

#: Nesting shown as a tree; deeper values are shown as compact JSON text.
MAX_DEPTH = 5
#: Characters of one text shown; the rest is cut with an ellipsis.
MAX_TEXT = 2000
#: Items of one list or dict shown.
MAX_ITEMS = 50


def _text(value: str) -> SafeString:
    cut = value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + "…"
    if "\n" in cut:
        return format_html('<pre class="tree-text">{}</pre>', cut)
    return format_html("{}", cut)


def _node(value, depth: int) -> SafeString:
    if value is None:
        return format_html('<span class="muted">{}</span>', "none")
    if isinstance(value, bool):
        return format_html("{}", "yes" if value else "no")
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, (int, float)):
        return format_html("{}", value)
    if depth >= MAX_DEPTH:
        return _text(json.dumps(value, ensure_ascii=False))
    if isinstance(value, dict):
        if not value:
            return format_html('<span class="muted">{}</span>', "none")
        items = list(value.items())[:MAX_ITEMS]
        rows = format_html_join(
            "", "<dt>{}</dt><dd>{}</dd>", ((str(k), _node(v, depth + 1)) for k, v in items)
        )
        more = len(value) - len(items)
        tail = format_html('<dt class="muted">{} more</dt>', more) if more > 0 else ""
        return format_html('<dl class="tree">{}{}</dl>', rows, tail)
    if isinstance(value, list):
        if not value:
            return format_html('<span class="muted">{}</span>', "none")
        items = value[:MAX_ITEMS]
        rows = format_html_join("", "<li>{}</li>", ((_node(v, depth + 1),) for v in items))
        return format_html('<ul class="tree">{}</ul>', rows)
    return _text(str(value))


@register.simple_tag
def tree(value) -> SafeString:
    """``value`` (any JSON value) as nested HTML: an object as a definition list, a list
    as a list, text as text (``<pre>`` when it spans lines). Every key and leaf is
    escaped (agent and tool output is untrusted); nesting past ``MAX_DEPTH`` is compact
    JSON text, text past ``MAX_TEXT`` characters and items past ``MAX_ITEMS`` are cut."""
    return _node(value, 0)
