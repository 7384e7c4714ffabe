"""Experiment tracking on MLflow: pipeline/stage runs, a buffered outage-tolerant tracker, the
model registry, dataset inputs, the parent run's stage table and run comparison.

    parent = start_pipeline_run(spec)                      # pipeline step 0; export VENUS_PARENT_RUN_ID
    with stage_run("mid_train", spec, provenance=prov) as tracker:
        train(..., tracker=tracker)                        # Tracker protocol of venus_core.train
    register_model(client, merge_run_id, "out/model", "venus-agent", {"parent_run": parent, ...})
    log_stage_table(client, parent, rows_from_summary(summary["stages"]))   # the parent's stage table
    print(format_diff(compare_runs(client, run_a, run_b)))

Default store: local SQLite (`platform.tracking_uri = sqlite:///runs/mlflow.db`); in a cluster,
the MLflow server's http:// URI. Import cost: this package imports mlflow (seconds), so callers
that may run without tracking import it lazily.
"""

from venus_core.io.tracking.buffer import BufferedRunWriter, GapReport, Outage, is_transient
from venus_core.io.tracking.compare import (RunDiff, RunSide, compare_runs, compare_sides, format_diff,
                                            side_from_dir, side_from_run)
from venus_core.io.tracking.registry import lineage_tags, register_model
from venus_core.io.tracking.runs import (JOB_SECTIONS, PARENT_ENV, MlflowTracker, experiment_id,
                                         finish_pipeline_run, flatten, make_client, spec_section,
                                         stage_run, start_pipeline_run)
from venus_core.io.tracking.stages import StageRow, log_stage_table, rows_from_runs, rows_from_summary

__all__ = [
    "JOB_SECTIONS", "PARENT_ENV", "BufferedRunWriter", "GapReport", "MlflowTracker", "Outage", "RunDiff",
    "RunSide", "StageRow", "compare_runs", "compare_sides", "experiment_id", "finish_pipeline_run", "flatten",
    "format_diff", "is_transient", "lineage_tags", "log_stage_table", "make_client", "register_model",
    "rows_from_runs", "rows_from_summary", "side_from_dir", "side_from_run", "spec_section", "stage_run",
    "start_pipeline_run",
]
