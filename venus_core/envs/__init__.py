"""venus_core.envs."""
