"""Docstring text for people: a tool's or a field's description as plain text, cleaned
of the reST and Markdown inline markup its author wrote for Sphinx or a README
(``code``, *emphasis*, :role:`target`, [links](url)). The result is still untrusted text:
templates escape it like any other."""

import re

# Order matters: a role's or a link's markup goes before the backticks inside it.
_INLINE = [
    (re.compile(r":[\w.+-]+:`~?([^`]+)`"), r"\1"),  # :class:`~pkg.Name`, :func:`name`
    (re.compile(r"`([^`<]+?)\s*<[^`>]+>`__?"), r"\1"),  # `text <url>`_
    (re.compile(r"\[([^\]]+)\]\([^)\s]+\)"), r"\1"),  # [text](url)
    (re.compile(r"``(.+?)``"), r"\1"),  # ``literal``
    (re.compile(r"`([^`]+)`_{0,2}"), r"\1"),  # `code`, `reference`_
    (re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*"), r"\1"),  # **strong**
    (re.compile(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])"), r"\1"),  # *emphasis*
    (re.compile(r"(?<!\w)__(?=\S)(.+?)(?<=\S)__(?!\w)"), r"\1"),  # __strong__
]


def plain_text(text: str) -> str:
    """``text`` (a docstring or description, any length) without inline markup and
    with runs of whitespace (newlines of a wrapped docstring) as one space; ``""`` for
    blank text. Identifiers keep their underscores (``snake_case`` is not emphasis).
    Never raises."""
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())
