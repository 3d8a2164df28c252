"""Engine state: the gateway (every status write and move), leases with fencing tokens, the
database clock, checkpoint state."""
