"""Operator and client control: starting and re-dispatching runs, cancel, resume from
a checkpoint, approvals, takeovers and their resolutions, workflow versions."""
