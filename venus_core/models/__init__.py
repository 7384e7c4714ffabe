"""venus_core.models."""
