"""Suite-wide settings. Runtime jobs log to MLflow when a tracking store is configured
(venus_core/runtime/tracking.py); the suite turns that off by default (`MLFLOW_TRACKING_URI=none`,
the documented off value) so job tests neither write `runs/mlflow.db` into the working directory
nor pay MLflow's store start-up per job. Tests of the MLflow wiring set a store explicitly."""

import os

os.environ.setdefault("MLFLOW_TRACKING_URI", "none")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
