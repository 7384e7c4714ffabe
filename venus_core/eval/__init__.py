"""Evaluation: scoring rules (`metrics`) shared by training-time held-out checks and `venus eval`."""
