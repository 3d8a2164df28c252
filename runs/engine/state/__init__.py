"""Engine state: the gateway (every state write and move), the store (claim, heartbeat
and commit, on PostgreSQL or SQLite), leases with fencing tokens, the database clock,
checkpoint state."""
