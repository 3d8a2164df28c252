"""The approvals app keeps no models of its own: Approval and Takeover are the engine's
state, in ``runs.models``. This module stays because django-stubs' mypy plugin imports
``<app>.models`` for every installed app."""
