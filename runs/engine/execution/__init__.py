"""Executing steps: the executor, the worker process, dispatch, the sweeper, the
watchdog and the step context."""
