"""The formatter of the log lines the project writes to a terminal (the console
handler of ``LOGGING`` in the settings).

Log records carry untrusted text: a tool's error, a model's reply, an operator's
reason, a thread id. Written raw, ESC in it would move the cursor or clear the screen of
whoever tails the log, ``\\r`` would overwrite the line, U+202E would reverse it, and a
newline would forge a log line of its own. ``TerminalSafeFormatter`` writes each of
those characters as its ``\\uXXXX`` escape, through the same rule as every command's
output (``runs.engine.rules.terminal_text``). The JSON format needs nothing more: its
serializer writes every such character as a JSON escape already.
"""

import logging

from runs.engine.rules import terminal_text


class TerminalSafeFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose output holds no character a terminal acts on: the
    line itself (the format with the message) is one line, its newlines escaped too; a
    traceback or stack after it keeps its newlines and escapes everything else."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        return terminal_text(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        # The message part is escaped already (escaping it again changes nothing); what
        # follows it is the traceback, whose text (an exception's message) is untrusted too.
        return terminal_text(super().format(record), newlines=True)
