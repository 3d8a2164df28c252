"""``runs status (RUN_ID | --thread T) [--json]``. A tool call an approver let run with
edited arguments is shown with the arguments used, marked as edited (``"edited"`` on
the call in JSON). Each step's output and a succeeded run's result are printed on one
line, escaped and cut (``runs.cli.common.shown``), and so is each message's text
(``MESSAGE_CHARS``); ``--json`` has them whole."""

import json

from approvals.tool_calls import edited_calls
from runs.cli.common import MESSAGE_CHARS, add_run_arguments, resolve_run, shown
from runs.cli.terminal import terminal_text
from runs.engine.service import run_status, status_extra_lines

help = "show a run's status, steps, next step and messages"


def add_arguments(parser):
    add_run_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _call(call: dict, edits: dict[str, dict]) -> str:
    edit = edits.get(call["id"])
    if edit is None:
        return f"{call['name']}({json.dumps(call['arguments'])}) [{call['id']}]"
    return (
        f"{call['name']}({json.dumps(edit['to'])}) [{call['id']}] (arguments edited by "
        f"{edit['by']}; the model asked {json.dumps(edit['from'])})"
    )


def handle(command, options):
    run = resolve_run(options)
    status = run_status(run)
    edits = edited_calls(run.pk)
    for message in status["messages"]:
        for call in message["tool_calls"]:
            if call["id"] in edits:
                call["edited"] = edits[call["id"]]
    if options["json"]:
        command.stdout.write(json.dumps(status, ensure_ascii=False))
        return
    out = command.stdout
    out.write(
        f"run {status['run_id']} ({status['workflow']}@{status['version']}) "
        f"thread {status['thread']}: {status['status']}"
    )
    out.write(f"next step: {status['next_step'] or '-'}")
    if status["pause_progress"]:
        out.write(status["pause_progress"])
    waiting = status["waiting_on"]
    if waiting and waiting["for"] == "signal":
        until = f" until {waiting['until']}" if waiting["until"] else " (no timeout)"
        out.write(f"waiting for signal {waiting['signal']}{until}")
    elif waiting and waiting["for"] == "children":
        out.write(f"waiting for child runs: {waiting['open']} of {waiting['total']} open")
    elif waiting:
        out.write(f"sleeping until {waiting['until']}")
    if status["parent"]:
        parent = status["parent"]
        out.write(
            f"child of: {parent['run']} (step {parent['step']}, position {parent['position']}"
            f"{', detached' if parent['detached'] else ''})"
        )
    if status["children"]["total"]:
        out.write(
            f"children: {status['children']['total']} ({status['children']['open']} open; "
            f"runs list --parent {status['run_id']})"
        )
    if status["replay_of"]:
        out.write(
            f"replay of: {status['replay_of']['run']} from {status['replay_of']['checkpoint']}"
        )
    if status["replays"]:
        out.write(f"replayed as: {', '.join(status['replays'])}")
    for s in status["steps"]:
        line = f"  step {s['name']:<20} {s['status']:<10} attempt {s['attempt']}"
        if "branches" in s:
            line += " branches: " + ", ".join(f"{k} {n}" for k, n in s["branches"].items())
        if s["output"] is not None:
            line += f" -> {shown(s['output'])}"
        out.write(line)
    if status["result"] is not None:
        out.write(f"result: {shown(status['result'])}")
    out.write(f"messages ({len(status['messages'])}):")
    for m in status["messages"]:
        calls = ", ".join(_call(c, edits) for c in m["tool_calls"])
        extra = f" -> {calls}" if calls else ""
        reply_to = f" (result of {m['tool_call_id']})" if m["tool_call_id"] else ""
        out.write(f"  {m['role']:<9} {terminal_text(m['content'], MESSAGE_CHARS)}{extra}{reply_to}")
    # What installed apps add about the outside world (the lab: its devices).
    for line in status_extra_lines(status):
        out.write(line)
    used = status["budget"]["used"]
    cost = used["cost_usd"] if used["cost_usd"] is not None else "unknown"
    out.write(
        f"usage: {used['model_calls']} model calls, {used['tool_calls']} tool calls, "
        f"{used['tokens']} tokens, cost {cost} USD"
    )
    takeover = status.get("takeover")
    if takeover:
        out.write(
            f"takeover {takeover['id']} OPEN ({takeover['cause']}) at "
            f"{takeover['step'] or '-'}: {takeover['reason']}"
        )
        out.write(f"  suggested: {takeover['suggested_action']}")
    compensation = status.get("compensation") or {}
    if compensation.get("status"):
        out.write(f"compensation: {compensation['status']}")
        for entry in compensation.get("steps", []):
            out.write(f"  {entry['step']:<20} {entry['status']} {entry.get('detail', '')}")
