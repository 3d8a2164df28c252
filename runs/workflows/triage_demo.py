"""A demo of child runs: a triage agent hands each ticket to a sub-agent and sums their
answers.

``triage_demo`` (input ``{"tickets": K, "hold_s": S}``): ``split`` names the K tickets ->
``triage`` starts one child run of ``triage_ticket`` per ticket (each on its own thread)
and waits for all of them without holding a worker or a lease -> ``combine`` sums the
children's priorities. ``triage_ticket`` (input ``{"ticket": n, "hold_s": S}``):
``claim`` takes the ticket (undone by its compensation when the child is cancelled) and
sets a durable timer of S seconds (the sub-agent thinking) -> ``answer`` returns the
ticket's priority. Cancelling the parent cancels the children that are still open.
"""

from agentops.authoring import Workflow, register

#: Most tickets one run triages.
MAX_TICKETS = 1000
#: Longest hold of a child, in seconds.
MAX_HOLD_S = 3600

ticket = Workflow(
    "triage_ticket",
    version=1,
    description="A sub-agent of triage_demo: claim the ticket, hold hold_s seconds, answer.",
    input_fields={"ticket": int, "hold_s": int},
    input_ranges={"ticket": (0, MAX_TICKETS), "hold_s": (0, MAX_HOLD_S)},
)


def _unclaim(ctx, output):
    """The ticket goes back to the queue."""
    return {"released": output["ticket"]}


@ticket.step(compensate=_unclaim)
def claim(ctx):
    ctx.sleep(ctx.input["hold_s"])
    return {"ticket": ctx.input["ticket"]}


@ticket.step()
def answer(ctx):
    return {"ticket": ctx.input["ticket"], "priority": 1 + ctx.input["ticket"] % 3}


workflow = Workflow(
    "triage_demo",
    version=1,
    description="Hand each ticket to a child run of triage_ticket; sum their priorities.",
    input_fields={"tickets": int, "hold_s": int},
    input_ranges={"tickets": (0, MAX_TICKETS), "hold_s": (0, MAX_HOLD_S)},
)


@workflow.step()
def split(ctx):
    return {"tickets": list(range(ctx.input["tickets"]))}


@workflow.child("triage_ticket", many=True)
def triage(ctx):
    hold_s = ctx.input["hold_s"]
    return [{"ticket": n, "hold_s": hold_s} for n in ctx.outputs["split"]["tickets"]]


@workflow.step()
def combine(ctx):
    answers = ctx.outputs["triage"]
    return {"tickets": len(answers), "priority_total": sum(a["priority"] for a in answers)}


register(ticket)
register(workflow)
