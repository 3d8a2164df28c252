"""``runs policy --thread T [queue|interrupt]``: show or set what a message arriving
during a run does."""

from runs.cli import arguments
from runs.cli.common import control_error
from runs.engine.service import ControlError, set_policy

help = "show or set a thread's policy for messages arriving during a run"


def add_arguments(parser):
    parser.add_argument(
        "policy",
        nargs="?",
        choices=["queue", "interrupt"],
        help="queue: a new message waits for the running run; interrupt: it cancels it "
        "(omit to show the current policy)",
    )
    parser.add_argument("--thread", required=True, type=arguments.thread_id, help="the thread id")


def handle(command, options):
    from runs.models import Thread

    if options["policy"] is None:
        thread = Thread.objects.filter(thread_id=options["thread"], owner=None).first()
        command.stdout.write(thread.policy if thread else Thread.Policy.QUEUE)
        return
    try:
        thread = set_policy(options["thread"], options["policy"])
    except ControlError as exc:
        raise control_error(exc) from exc
    command.stdout.write(f"thread {thread.thread_id}: policy {thread.policy}")
