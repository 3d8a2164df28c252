"""The client JSON API under /api/v1/ (django-ninja), its SSE stream and /metrics.

See docs/api.md. Views stay thin: they check access and shapes, then call engine
functions (``runs.engine.*``, ``approvals.services``)."""
