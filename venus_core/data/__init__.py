"""venus_core.data."""
