"""Registering the merged model in the MLflow model registry, with its lineage as tags.

Why `create_model_version(source=...)`: the merged model is a plain HF-format folder (safetensors,
config, tokenizer), not an MLflow "logged model" with an MLmodel file, and MLflow 3's
`mlflow.register_model` expects the latter. The folder is uploaded as an artifact of the run
(unless `model` already names an artifact path of the run) and the version points at it.
Lineage tags (`venus.lineage.<key>`) carry the parent run, the stage runs of the specialists, the
merge method and the spec hash, so a registered version leads back to everything that made it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException

from venus_core.io.tracking.runs import MAX_TAG_VALUE, TRUNCATED

LINEAGE_PREFIX = "venus.lineage."


def lineage_tags(lineage: Mapping[str, Any]) -> dict[str, str]:
    """{"parent_run": "abc", "stage_runs": [...]} -> {"venus.lineage.parent_run": "abc", ...} (JSON for non-strings)."""
    out = {}
    for k, v in lineage.items():
        text = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
        if len(text) > MAX_TAG_VALUE:
            text = text[: MAX_TAG_VALUE - len(TRUNCATED)] + TRUNCATED
        out[LINEAGE_PREFIX + str(k)] = text
    return out


def register_model(client: MlflowClient, run_id: str, model: str | Path, name: str,
                   lineage: Mapping[str, Any], *, artifact_path: str = "model",
                   description: str | None = None) -> ModelVersion:
    """Register `model` (a local folder, or an artifact path of `run_id`) as a new version of `name`.

    The lineage goes on the version as tags and on the run (so the run page shows it too).
    Returns the ModelVersion (its `.version` is the registry's number).
    """
    run = client.get_run(run_id)
    local = Path(model)
    if local.is_dir():
        if not any(local.iterdir()):
            raise ValueError(f"model folder {local} is empty")
        client.log_artifacts(run_id, str(local), artifact_path)
        rel = artifact_path
    elif local.exists():
        raise ValueError(f"model {local} is a file; give the model folder or an artifact path of run {run_id}")
    else:
        rel = str(model).strip("/")
        listed = {f.path for f in client.list_artifacts(run_id, str(Path(rel).parent) if "/" in rel else None)}
        if rel not in listed:
            raise FileNotFoundError(f"{model!r} is neither a local folder nor an artifact of run {run_id} "
                                    f"(artifacts there: {sorted(listed)})")
    source = f"{run.info.artifact_uri.rstrip('/')}/{rel}"
    tags = lineage_tags({"run": run_id, **lineage})
    try:
        client.create_registered_model(name, description=description)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = client.create_model_version(name, source=source, run_id=run_id, tags=tags, description=description)
    for k, v in tags.items():
        client.set_tag(run_id, k, v)
    return version
