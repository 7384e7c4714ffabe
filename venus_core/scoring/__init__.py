"""venus_core.scoring."""
