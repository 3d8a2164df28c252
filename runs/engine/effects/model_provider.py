"""The model a step's ``call_model`` and ``stream_model`` ask: set once at start-up
(``runs.apps`` installs the offline simulator), so the engine imports no model code.

A provider is any object with ``COST_PER_CALL_USD`` (USD, a decimal string),
``complete(messages, tools) -> reply``, ``stream(messages) -> iterator of str`` and
``ModelReply(content=...)`` (the reply type ``stream_model`` returns).
"""

from typing import Any

_provider: Any = None


def set_provider(provider: Any) -> None:
    """Install ``provider`` (see the module docstring) for this process."""
    global _provider
    _provider = provider


def provider() -> Any:
    """The installed provider. Raises ``RuntimeError`` when none was installed (the
    ``runs`` app installs one in ``ready()``)."""
    if _provider is None:
        raise RuntimeError("no model provider installed (is the runs app loaded?)")
    return _provider
