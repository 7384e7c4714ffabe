"""Suite-wide settings. Runtime jobs log to MLflow when a tracking store is configured
(venus_core/runtime/tracking.py); the suite turns that off by default (`MLFLOW_TRACKING_URI=none`,
the documented off value) so job tests neither write `runs/mlflow.db` into the working directory
nor pay MLflow's store start-up per job. Tests of the MLflow wiring set a store explicitly."""

import os

os.environ.setdefault("MLFLOW_TRACKING_URI", "none")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# Property tests are reproducible by default: the same examples on every run and machine, no example
# database written into the tree, no wall-clock deadline (a loaded CI machine is not a failure).
# `VENUS_HYPOTHESIS_PROFILE=explore` draws fresh examples (and keeps hypothesis' deadline) to look
# for new failures; a failure found that way prints the `@reproduce_failure` blob to pin it.
from hypothesis import settings  # noqa: E402

settings.register_profile("venus", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)
settings.load_profile(os.environ.get("VENUS_HYPOTHESIS_PROFILE", "venus"))
