"""URLs of the operator console (namespace ``console``)."""

from django.urls import path

from approvals import views as approval_views
from runs import id_converters  # noqa: F401 - registers <run:...>, <approval:...>...
from runs.views import (
    actions,
    attempt_log,
    audit,
    overview,
    replay,
    run_detail,
    run_stream,
    runs_list,
    triage,
    unknowns,
    values,
    waits,
    workers,
)

app_name = "console"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("storage/", overview.overview_storage, name="overview_storage"),
    path("triage/", triage.triage, name="triage"),
    path("runs/", runs_list.runs_list, name="runs"),
    path("runs/bulk/", actions.bulk, name="bulk"),
    path("runs/replay/", replay.bulk_replay_view, name="bulk_replay"),
    path("runs/<run:run_id>/", run_detail.run_detail, name="run"),
    path("runs/<run:run_id>/events/", run_detail.run_events, name="run_events"),
    path("runs/<run:run_id>/stream/", run_stream.run_stream, name="run_stream"),
    path(
        "runs/<run:run_id>/steps/<step:step_id>/attempts/<attempt:attempt>/log/",
        attempt_log.attempt_log,
        name="attempt_log",
    ),
    path("runs/<run:run_id>/values/<str:kind>/<value:pk>/", values.full_value, name="value"),
    path("runs/<run:run_id>/cancel/", actions.cancel, name="cancel"),
    path("runs/<run:run_id>/redispatch/", actions.redispatch, name="redispatch"),
    path("runs/<run:run_id>/retry/", actions.retry, name="retry"),
    path("runs/<run:run_id>/budget/", actions.budget, name="budget"),
    path("runs/<run:run_id>/resume/", actions.resume_preview, name="resume_preview"),
    path("runs/<run:run_id>/replay/", replay.replay_preview, name="replay"),
    path("runs/<run:run_id>/signal/", waits.signal, name="signal"),
    path("schedules/", waits.schedule_list, name="schedules"),
    path("schedules/<str:name>/<str:action>/", waits.schedule_action, name="schedule_action"),
    path(
        "artifacts/<artifact:artifact_id>/download/", run_detail.artifact_download, name="artifact"
    ),
    path("unknowns/", unknowns.unknowns, name="unknowns"),
    path("unknowns/<step:step_id>/verify/", unknowns.verify, name="verify"),
    path("unknowns/<step:step_id>/resolve/", unknowns.resolve, name="resolve"),
    path("approvals/", approval_views.approvals_inbox, name="approvals"),
    path("approvals/<approval:approval_id>/decide/", approval_views.decide_view, name="decide"),
    path("takeovers/", approval_views.takeover_desk, name="takeovers"),
    path("takeovers/<takeover:takeover_id>/claim/", approval_views.claim_view, name="claim"),
    path(
        "takeovers/<takeover:takeover_id>/resolve/",
        approval_views.resolve_view,
        name="resolve_takeover",
    ),
    path("workers/", workers.workers, name="workers"),
    path("audit/", audit.audit, name="audit"),
]
