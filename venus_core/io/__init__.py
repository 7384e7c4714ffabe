"""venus_core.io."""
