"""venus_core.train."""
