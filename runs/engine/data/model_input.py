"""Context assembly: the one function that builds a model call's input from stored
records only (never from process memory), so a resumed run rebuilds exactly what the
crashed attempt would have sent.

Order of the parts::

    system        the step's system instruction (``StepDef.options["system"]``)
    summary       the latest stored Summary of older history, covering 1..N
    messages      the thread's history N+1..H in full (H = the run's start point)
    tool_results  this run's own messages after H (tool calls, tool results with
                  their call ids, assistant text), in stored order

The history of a run ends at H, the thread's last message seq when the run started
(the ``start`` checkpoint's ``message_seq``): messages that arrive later belong to
later runs and are never mixed in. The seam is exact: the summary covers 1..N and the
messages part starts at N+1, so no message is dropped or repeated.

A new summary is due when the uncovered history (N+1..H) counts more than
``AGENTOPS_CONTEXT_SUMMARY_TOKENS`` tokens by the configured counter
(``AGENTOPS_TOKEN_COUNTER``, a dotted path to ``fn(text) -> int``); it then covers
1..H - ``AGENTOPS_CONTEXT_RECENT_MESSAGES``, so the most recent messages stay in full.
"""

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.db.models import Q, Subquery
from django.utils.module_loading import import_string

from runs.models import Checkpoint, Message, Run, Step, Summary

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """The default token counter: words and punctuation marks (a rough stand-in for a
    model tokenizer; configure ``AGENTOPS_TOKEN_COUNTER`` for a real one)."""
    return len(_TOKEN.findall(text or ""))


@lru_cache(maxsize=8)
def _counter(path: str):
    return import_string(path)


def token_counter():
    """The configured counter ``fn(text: str) -> int``."""
    return _counter(settings.AGENTOPS_TOKEN_COUNTER)


def message_tokens(message: dict[str, Any]) -> int:
    """Tokens of one message dict: its content plus its tool calls' names and arguments."""
    count = token_counter()
    total = count(message.get("content") or "")
    for call in message.get("tool_calls") or []:
        total += count(f"{call.get('name', '')} {call.get('arguments', '')}")
    return total


@dataclass
class AssembledContext:
    """What a model call receives, part by part.

    ``parts``: list of dicts, each with a ``label`` (``system``, ``summary``,
    ``messages``, ``tool_results``); ``summary`` has ``covers: [first, last]``,
    ``summary_id`` and ``content``; ``messages`` and ``tool_results`` have ``from_seq``,
    ``to_seq`` and ``messages`` (dicts with ``seq``, ``id``, ``role``, ``content``,
    ``tool_calls``, ``tool_call_id``). ``history_end`` is H. ``model_input`` flattens
    the parts into the chat message list a model API takes.
    """

    run_id: str
    step: str | None
    history_end: int
    parts: list[dict[str, Any]] = field(default_factory=list)

    def part(self, label: str) -> dict[str, Any] | None:
        return next((p for p in self.parts if p["label"] == label), None)

    @property
    def model_input(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for part in self.parts:
            if part["label"] == "system":
                out.append(_chat("system", part["content"]))
            elif part["label"] == "summary":
                first, last = part["covers"]
                text = f"Summary of messages {first}..{last}:\n{part['content']}"
                out.append(_chat("system", text))
            else:
                out.extend(
                    _chat(m["role"], m["content"], m["tool_calls"], m["tool_call_id"])
                    for m in part["messages"]
                )
        return out

    @property
    def seqs(self) -> list[int]:
        """Every message seq the input carries, summary-covered ones included, in order."""
        out: list[int] = []
        for part in self.parts:
            if part["label"] == "summary":
                out.extend(range(part["covers"][0], part["covers"][1] + 1))
            elif part["label"] in ("messages", "tool_results"):
                out.extend(m["seq"] for m in part["messages"])
        return out

    def as_dict(self) -> dict[str, Any]:
        """The ``runs context --json`` document: ``{run_id, step, history_end, parts,
        model_input, tokens}``."""
        count = token_counter()
        return {
            "run_id": self.run_id,
            "step": self.step,
            "history_end": self.history_end,
            "parts": self.parts,
            "model_input": self.model_input,
            "tokens": sum(count(m["content"] or "") for m in self.model_input),
        }


def _chat(role: str, content: str, tool_calls=None, tool_call_id=None) -> dict[str, Any]:
    return {
        "role": role,
        "content": content,
        "tool_calls": tool_calls or [],
        "tool_call_id": tool_call_id or None,
    }


def _row(m: Message) -> dict[str, Any]:
    return {"seq": m.seq, **m.as_dict()}


def history_end(run: Run) -> int:
    """H: the thread's last message seq when ``run`` started (its first checkpoint:
    ``start``, or for a replay the original's checkpoint it starts from), or, for a run
    without one, the last seq of its own user messages."""
    first = Checkpoint.objects.filter(run_id=run.pk).order_by("pk").first()
    state = first.state if first else None
    if state and state.get("message_seq") is not None:
        return int(state["message_seq"])
    own = (
        Message.objects.filter(run_id=run.pk, step__isnull=True, seq__isnull=False)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    return int(own or 0)


def current_summary(run: Run, end: int | None = None) -> Summary | None:
    """The summary this run uses: the widest one within its history (last_seq <= H)
    made by this run or by a run created before it (so a later run's summary never
    changes what an earlier run was given)."""
    end = history_end(run) if end is None else end
    # Compared with the stored value, not this object's: SQLite keeps a database-made
    # time as text to the millisecond, and the same time sent back as a parameter has
    # six digits, so two runs made in the same millisecond would compare as ordered.
    created = Run.objects.filter(pk=run.pk).values("created_at")
    return (
        Summary.objects.filter(thread_id=run.thread_id, last_seq__lte=end)
        .filter(Q(run_id=run.pk) | Q(run__isnull=True) | Q(run__created_at__lt=Subquery(created)))
        .order_by("-last_seq")
        .first()
    )


def _step_position(run: Run, step_name: str | None) -> Step | None:
    if step_name is None:
        return None
    return (
        Step.objects.filter(run_id=run.pk, name=step_name).order_by("-generation", "-seq").first()
    )


def assemble_context(
    run: Run, *, step: str | None = None, system: str | None = None
) -> AssembledContext:
    """Build the model input of ``run`` as seen by step ``step`` from stored records.

    ``step`` (a step name) limits this run's own messages to those committed by steps
    before it (its input, not its output); ``None`` takes all committed so far. The
    system instruction is ``system`` or the step's ``options["system"]`` from the
    run's workflow. Only FINAL messages are used.
    """
    end = history_end(run)
    result = AssembledContext(run_id=str(run.pk), step=step, history_end=end)
    if system is None and step is not None:
        system = _system_instruction(run, step)
    if system:
        result.parts.append({"label": "system", "content": system})
    summary = current_summary(run, end)
    covered = 0
    if summary is not None:
        covered = summary.last_seq
        result.parts.append(
            {
                "label": "summary",
                "summary_id": summary.pk,
                "covers": [summary.first_seq, summary.last_seq],
                "tokens": summary.tokens,
                "content": summary.content,
            }
        )
    finals = Message.objects.filter(thread_id=run.thread_id, status=Message.Status.FINAL)
    history = [_row(m) for m in finals.filter(seq__gt=covered, seq__lte=end).order_by("seq")]
    result.parts.append(
        {"label": "messages", "from_seq": covered + 1, "to_seq": end, "messages": history}
    )
    own = finals.filter(run_id=run.pk, seq__gt=end).select_related("step").order_by("seq")
    position = _step_position(run, step)
    if position is not None:
        own = own.filter(step__seq__lt=position.seq, step__generation=position.generation)
    own_rows = [_row(m) for m in own]
    result.parts.append(
        {
            "label": "tool_results",
            "from_seq": own_rows[0]["seq"] if own_rows else None,
            "to_seq": own_rows[-1]["seq"] if own_rows else None,
            "messages": own_rows,
        }
    )
    return result


def _system_instruction(run: Run, step: str) -> str | None:
    from runs.workflows import registry

    try:
        workflow = registry.get(run.workflow, run.workflow_version)
    except registry.UnknownWorkflow:
        return None
    if not workflow.has(step):
        return None
    return workflow.get(step).options.get("system")


@dataclass(frozen=True)
class SummaryPlan:
    """A summary to make: cover ``1..last_seq``, extending ``previous`` (or nothing)
    with ``new_messages`` (seq ``previous.last_seq+1..last_seq``)."""

    last_seq: int
    previous: Summary | None
    new_messages: list[dict[str, Any]]
    covered_tokens: int


def summary_due(run: Run) -> SummaryPlan | None:
    """The summary ``run`` should make before calling the model, or ``None``.

    Due when the history not covered by the current summary counts more than
    ``AGENTOPS_CONTEXT_SUMMARY_TOKENS`` tokens and leaving the most recent
    ``AGENTOPS_CONTEXT_RECENT_MESSAGES`` messages in full still covers something new.
    """
    end = history_end(run)
    summary = current_summary(run, end)
    covered = summary.last_seq if summary else 0
    uncovered = [
        _row(m)
        for m in Message.objects.filter(
            thread_id=run.thread_id,
            status=Message.Status.FINAL,
            seq__gt=covered,
            seq__lte=end,
        ).order_by("seq")
    ]
    if sum(message_tokens(m) for m in uncovered) <= settings.AGENTOPS_CONTEXT_SUMMARY_TOKENS:
        return None
    last = end - settings.AGENTOPS_CONTEXT_RECENT_MESSAGES
    if last <= covered:
        return None
    new = [m for m in uncovered if m["seq"] <= last]
    previous_tokens = summary.covered_tokens if summary else 0
    return SummaryPlan(
        last_seq=last,
        previous=summary,
        new_messages=new,
        covered_tokens=previous_tokens + sum(message_tokens(m) for m in new),
    )
