"""venus_core.daas."""
