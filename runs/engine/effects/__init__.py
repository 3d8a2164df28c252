"""Side effects: the operation ledger, calls with timeouts, unknown outcomes, retry
policies, budgets, compensation."""
