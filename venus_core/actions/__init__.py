"""venus_core.actions."""
