"""venus_core.merge."""
