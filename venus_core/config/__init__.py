"""venus_core.config."""
