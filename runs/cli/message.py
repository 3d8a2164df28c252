"""``runs message --thread T TEXT [--request-id ID] [--workflow W] [--json]``: post a
user message; it starts a run now, or waits (queue) / interrupts per the thread policy."""

import json

from runs.cli import arguments
from runs.cli.common import control_error
from runs.engine.service import ControlError, post_message

help = "post a user message to a thread (starts, queues or interrupts per its policy)"


def add_arguments(parser):
    parser.add_argument("text", help="the user's message")
    parser.add_argument(
        "--thread",
        required=True,
        type=arguments.thread_id,
        help="the thread id the message belongs to",
    )
    parser.add_argument(
        "--request-id",
        default=None,
        type=arguments.identifier("request_id"),
        help="client idempotency key: a resend with the same id is stored once",
    )
    parser.add_argument(
        "--workflow",
        default=None,
        type=arguments.identifier("workflow"),
        help="workflow of the new run (default: the thread's latest, else chat)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def handle(command, options):
    try:
        posted = post_message(
            options["thread"],
            options["text"],
            request_id=options["request_id"],
            workflow=options["workflow"],
        )
    except ControlError as exc:
        raise control_error(exc) from exc
    if options["json"]:
        command.stdout.write(json.dumps(posted.as_dict()))
        return
    doc = posted.as_dict()
    command.stdout.write(
        f"message {doc['message_id']} {doc['action']}: run {doc['run_id']}"
        + (f" (interrupting {', '.join(doc['interrupted'])})" if doc["interrupted"] else "")
    )
