"""venus_core.eval."""
