"""Terminal-safe text: the one formatter every command's output goes through.

Stored text came from users, agents, tools and models (messages, step outputs, errors,
reasons, thread ids...). Printed raw, a control character in it acts on the operator's
terminal: ESC starts a sequence that clears the screen or sets the window title, ``\\r``
overwrites what was printed, U+202E reverses the text after it. ``terminal_text``
writes each such character as its ``\\uXXXX`` escape, which is also a valid JSON escape
of the same character, so a ``--json`` document stays the same value after it.
"""

import unicodedata

from django.core.management.base import BaseCommand, OutputWrapper

from runs.engine.service import BIDI_CONTROLS

#: Unicode categories a terminal acts on: controls (C0, DEL, C1), lone surrogates, line
#: and paragraph separators.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})


def is_unsafe(char: str) -> bool:
    """Whether the one character ``char`` acts on a terminal (a control, a lone
    surrogate, a line or paragraph separator or a bidirectional control)."""
    return char in BIDI_CONTROLS or unicodedata.category(char) in _UNSAFE_CATEGORIES


def _escape(char: str) -> str:
    return f"\\u{ord(char):04x}"


def terminal_text(text: object, limit: int | None = None, *, newlines: bool = False) -> str:
    """``text`` (any value; ``str()`` of it) with every character that acts on a
    terminal (``is_unsafe``) written as ``\\uXXXX``; ``\\n`` kept when ``newlines`` (output
    meant to span lines). Cut to ``limit`` characters (after escaping) with ``...`` and the
    whole length, ``"... (N characters)"``, when longer. Never raises."""
    text = str(text)
    text = "".join(_escape(c) if is_unsafe(c) and not (newlines and c == "\n") else c for c in text)
    if limit is not None and len(text) > limit:
        return f"{text[:limit]}... ({len(text)} characters)"
    return text


class TerminalSafeOutput(OutputWrapper):
    """A command's ``stdout``/``stderr`` that passes every write through
    ``terminal_text`` (newlines kept) before Django styles it, so no command can print a
    raw control character, however its text was put together."""

    def write(self, msg="", style_func=None, ending=None):
        super().write(terminal_text(msg, newlines=True), style_func, ending)


def _safe(output: OutputWrapper) -> TerminalSafeOutput:
    if isinstance(output, TerminalSafeOutput):
        return output
    safe = TerminalSafeOutput(output._out, ending=output.ending)  # type: ignore[arg-type]
    safe.__dict__["_style_func"] = output.__dict__["_style_func"]  # keeps the colour
    return safe


class TerminalSafeCommand(BaseCommand):
    """A management command whose ``stdout`` and ``stderr`` are ``TerminalSafeOutput``,
    whatever Django or a test (``call_command(stdout=...)``) assigns to them."""

    @property
    def stdout(self) -> TerminalSafeOutput:
        return self._safe_stdout

    @stdout.setter
    def stdout(self, output: OutputWrapper) -> None:
        self._safe_stdout = _safe(output)

    @property
    def stderr(self) -> TerminalSafeOutput:
        return self._safe_stderr

    @stderr.setter
    def stderr(self, output: OutputWrapper) -> None:
        self._safe_stderr = _safe(output)
