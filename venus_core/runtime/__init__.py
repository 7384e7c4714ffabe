"""Runtime jobs: one module per pipeline job, each a container entry point
(`python -m venus_core.runtime.<job>`). `common` holds what they share."""
