"""What a refused request must leave as it was, for the tests that send bad input
through every face."""


def written_state(*, tokens: bool = False) -> tuple:
    """Every run, approval and takeover with its state, the counts of events, signals,
    schedules and audited refusals, and with ``tokens`` of active API tokens (a test
    that makes its token after the first look leaves it out); equal before and after a
    refusal."""
    from apitokens.models import ApiToken
    from runs.models import Approval, Event, RefusedAction, Run, Schedule, Signal, Takeover

    return (
        sorted(Run.objects.values_list("pk", "status", "version", "budget")),
        Event.objects.count(),
        Signal.objects.count(),
        sorted(Approval.objects.values_list("pk", "status", "comment")),
        sorted(Takeover.objects.values_list("pk", "status", "claimed_by")),
        Schedule.objects.count(),
        ApiToken.objects.filter(revoked_at__isnull=True).count() if tokens else None,
        RefusedAction.objects.count(),
    )
