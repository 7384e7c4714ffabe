"""venus_core.rewards."""
