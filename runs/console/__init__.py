"""Helpers of the operator console: access checks, filters, triage groups, step attempts.

The views in ``runs.views`` and ``approvals.views`` stay thin: they read through these
helpers and act only through the engine functions (``runs.engine.*``,
``approvals.services``).
"""
