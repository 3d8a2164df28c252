"""The third demo: a weekly report that a person must approve before it is published.

``collect_sources`` (the simulated news feed; also holds the week's slot at the
publisher, released again by its compensation) -> ``deduplicate`` -> ``analyze`` (a loop
with a safe point per source, so cancel stops it mid-way) -> ``draft_report`` (writes
``sources.json`` and ``report.md`` artifacts, file first, then the row, sha256 each) ->
``approve_publication`` (approval: the run waits, no worker holds anything) ->
``publish`` (the simulated publisher; not compensable, so it is last and guarded by the
approval, and it reads ``report.md`` through the checksum check first). Reject or expiry
goes to ``shelve_draft`` instead, which gives the slot back.

Input: ``{"week": "2026-W48"}``; optional ``"focus"`` (a topic the report leads with) and
``"delays"`` (``{"collect_sources": s, "analyze": s}``: seconds of simulated work; the
collect delay is one uninterruptible wait, the analyze delay is per source, with a safe
point before each, for drills).
"""

import json
import time

from agentops.authoring import Tool, Workflow, register
from lab.sim import devices

fetch_news = Tool(
    "newsfeed.fetch",
    fn=lambda args, call: devices.fetch_sources(
        args["week"], run_id=call.run_id, key=call.idempotency_key
    ),
    side_effect="read",
)
reserve_slot = Tool(
    "publisher.reserve",
    fn=lambda args, call: devices.reserve_slot(
        args["week"], run_id=call.run_id, key=call.idempotency_key
    ),
    side_effect="idempotent",
)
release_slot = Tool(
    "publisher.release",
    fn=lambda args, call: devices.release_slot(
        args["week"], run_id=call.run_id, key=call.idempotency_key
    ),
    side_effect="idempotent",
)
publish_report = Tool(
    "publisher.publish",
    fn=lambda args, call: devices.publish(
        args["title"], args["body"], run_id=call.run_id, key=call.idempotency_key
    ),
    side_effect="idempotent",
)

workflow = Workflow(
    "weekly_report",
    version=1,
    description="Collect the week's sources, draft a report, publish it after approval.",
    input_fields={"week": str},
)


def _delay(ctx, step: str) -> float:
    delays = ctx.input.get("delays") or {}
    return float(delays.get(step, 0) or 0)


def _release_slot(ctx, output) -> None:
    """Compensation of ``collect_sources``: give the publisher slot back (through the
    ledger, so a repeated compensation pass releases once)."""
    ctx.call_tool(release_slot, {"week": output["slot"]["slot"]})


def _work(ctx, seconds: float) -> None:
    """Simulated interruptible work: short slices with a safe point before each, so a
    cancel (seen by the heartbeat) or a lost lease stops the step within a slice."""
    deadline = time.monotonic() + seconds
    while True:
        ctx.safe_point()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(0.1, left))


@workflow.step(compensate=_release_slot)
def collect_sources(ctx):
    week = ctx.input["week"]
    slot = ctx.call_tool(reserve_slot, {"week": week})
    sources = ctx.call_tool(fetch_news, {"week": week})
    if _delay(ctx, "collect_sources"):
        time.sleep(_delay(ctx, "collect_sources"))  # uninterruptible work: no safe point
    return {"sources": sources, "slot": slot}


@workflow.step()
def deduplicate(ctx):
    seen: set[str] = set()
    unique = []
    for item in ctx.outputs["collect_sources"]["sources"]:
        if item["url"] not in seen:
            seen.add(item["url"])
            unique.append(item)
    dropped = len(ctx.outputs["collect_sources"]["sources"]) - len(unique)
    return {"sources": unique, "dropped": dropped}


@workflow.step()
def analyze(ctx):
    topics: dict[str, int] = {}
    for item in ctx.outputs["deduplicate"]["sources"]:
        _work(ctx, _delay(ctx, "analyze"))
        topics[item["topic"]] = topics.get(item["topic"], 0) + 1
    focus = ctx.input.get("focus") or max(sorted(topics), key=lambda t: topics[t])
    return {"topics": dict(sorted(topics.items())), "focus": focus}


@workflow.step()
def draft_report(ctx):
    week = ctx.input["week"]
    sources = ctx.outputs["deduplicate"]["sources"]
    analysis = ctx.outputs["analyze"]
    title = f"Weekly report {week}: {analysis['focus']}"
    lines = [f"# {title}", "", f"{len(sources)} sources this week.", "", "## Topics", ""]
    lines += [f"- {topic}: {count}" for topic, count in analysis["topics"].items()]
    lines += ["", "## Sources", ""]
    lines += [f"- [{s['title']}]({s['url']})" for s in sources]
    sources_json = ctx.save_artifact(
        "sources.json", json.dumps(sources, indent=2), kind="data", metadata={"week": week}
    )
    report = ctx.save_artifact(
        "report.md", "\n".join(lines) + "\n", kind="report", metadata={"week": week, "title": title}
    )
    return {
        "title": title,
        "artifacts": [
            {"name": a.name, "id": a.pk, "sha256": a.checksum, "size": a.size}
            for a in (sources_json, report)
        ],
    }


@workflow.approval(on_reject="shelve_draft")
def approve_publication(ctx):
    draft = ctx.outputs["draft_report"]
    excerpt = ctx.read_artifact("report.md").decode("utf-8")[:400]
    return {
        "question": f'Publish "{draft["title"]}"?',
        "reason": "Publishing cannot be undone; a person checks the draft first.",
        "evidence": {"artifacts": draft["artifacts"], "report_excerpt": excerpt},
    }


@workflow.step(compensable=False, final=True)
def publish(ctx):
    title = ctx.outputs["draft_report"]["title"]
    body = ctx.read_artifact("report.md").decode("utf-8")  # checksum verified first
    receipt = ctx.call_tool(publish_report, {"title": title, "body": body})
    return {"published": True, "receipt": receipt}


@workflow.step(final=True)
def shelve_draft(ctx):
    decision = ctx.outputs.get("approve_publication") or {}
    released = ctx.call_tool(release_slot, {"week": ctx.input["week"]})
    return {"published": False, "decision": decision.get("decision"), "slot": released}


register(workflow)
