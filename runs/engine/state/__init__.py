"""Engine state: the gateway (every state write and move), leases with fencing tokens,
the database clock, checkpoint state."""
