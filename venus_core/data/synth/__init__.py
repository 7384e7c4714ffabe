"""venus_core.data.synth."""
