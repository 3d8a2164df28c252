"""Terminal-safe text: the one formatter every command's output goes through.

Stored text came from users, agents, tools and models (messages, step outputs, errors,
reasons, thread ids...). Printed raw, a control character in it acts on the operator's
terminal: ESC starts a sequence that clears the screen or sets the window title, ``\\r``
overwrites what was printed, U+202E reverses the text after it. ``terminal_text``
(``runs.engine.rules``) writes each such character as its ``\\uXXXX`` escape, which is
also a valid JSON escape of the same character, so a ``--json`` document stays the same
value after it.
"""

from django.core.management.base import BaseCommand, OutputWrapper

# The escaping is the engine's one output rule (log lines use it too); tests and
# commands take both names from here.
from runs.engine.service import is_unsafe, terminal_text

__all__ = ["TerminalSafeCommand", "TerminalSafeOutput", "is_unsafe", "terminal_text"]


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
