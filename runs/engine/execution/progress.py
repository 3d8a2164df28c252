"""The worker's progress lines on its stdout (``ENTER <step>``, ``CRASH ...``) and the
exit code of an injected crash: what the executor and the lab's injected faults both
print, in a module of its own so that neither needs the other."""

from runs.engine.execution import attempt_logs

#: Exit code of an injected crash (``runs start --crash-before``), as in the demo.
CRASH_EXIT_CODE = 75


def say(line: str) -> None:
    """Progress line on the worker's stdout (``ENTER <step>``), flushed at once. Best
    effort: a stdout whose reader went away must not fail the step it announces."""
    stdout = attempt_logs.real_stdout()
    try:
        stdout.write(line + "\n")
        stdout.flush()
    except (OSError, ValueError):
        pass
