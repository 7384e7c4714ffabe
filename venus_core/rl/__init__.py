"""venus_core.rl."""
