"""venus_core.runtime."""
