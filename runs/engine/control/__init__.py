"""Operator and client control: starting and re-dispatching runs, cancel, resume from a
checkpoint, takeovers, workflow versions."""
