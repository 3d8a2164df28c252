"""The one rule for names an operator gives and later types again in a URL path, a
command line or a log line: schedule names, signal names, hook names.

A name is 1..100 characters of ASCII letters, digits, ``.``, ``_`` and ``-``, starting
with a letter or digit: no control characters or newlines (a forged log line), no
``/``, ``?`` or ``#`` (a name the API could never reach), no blank. Free-form text
(messages) and other identifiers (thread ids, checkpoint names) follow
``runs.engine.rules`` instead. This module imports
nothing from Django, so settings can check hook names with it.
"""

import re

#: Longest name.
MAX_NAME_CHARS = 100
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: What the rule allows, for refusals.
NAME_RULE = (
    f"1..{MAX_NAME_CHARS} characters of letters, digits, '.', '_' and '-', "
    "starting with a letter or digit"
)


def name_problem(value: object) -> str | None:
    """Why ``value`` is not a name (``"must be 1..100 characters of ..."``), or
    ``None`` when it is one."""
    if isinstance(value, str) and NAME.fullmatch(value):
        return None
    return f"must be {NAME_RULE}"
