"""A ``manage.py shell`` that stays: one process per deployment answers many reads.

Started by ``Deployment.shell`` / ``Deployment.call`` with the deployment's environment.
Each request is one JSON line on stdin, ``{"code": "..."}`` (run as ``manage.py shell -c``
runs it: the shell module's globals and its automatic model imports) or
``{"command": ["runs", "status", ...]}`` (run through ``call_command``); each answer is one
JSON line on stdout, ``{"out": what it printed, "error": a traceback or null}``. Every
connection is closed after each request, as the end of a ``manage.py`` process closes
them, so the probe holds no database session or SQLite lock between requests.

A test's reads cost a Python process and Django's start-up each otherwise (about half a
second of CPU), which made them a tenth of the suite's CPU.
"""

import contextlib
import io
import json
import os
import sys
import traceback


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.core.management.commands import shell
    from django.db import connections

    namespace = {**vars(shell), **shell.Command().get_namespace(verbosity=0)}
    answers = sys.stdout
    # What the code prints goes to its answer; anything printed outside a request must
    # not corrupt the protocol.
    sys.stdout = sys.stderr
    for line in sys.stdin:
        request = json.loads(line)
        out = io.StringIO()
        error = None
        try:
            with contextlib.redirect_stdout(out):
                if "code" in request:
                    exec(request["code"], dict(namespace))
                else:
                    call_command(*request["command"], stdout=out)
        except BaseException:  # SystemExit and CommandError too: the test shows them
            error = traceback.format_exc()
        finally:
            connections.close_all()
        answers.write(json.dumps({"out": out.getvalue(), "error": error}) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
