"""Venus datasets as MLflow dataset inputs: what a run trained (or was evaluated) on, with digests.

    ds = dataset_input("/data/mixture/train", "manifest:<sha256>", context="training",
                       profile={"records": 373})
    log_dataset_inputs(client, run_id, [ds])                      # the run's "Datasets used"
    copy_dataset_inputs(client, [mid_train_run, ...], merge_run)  # the merged model's lineage

A Venus dataset directory is identified by the sha256 of its manifest.json (runtime.common.dir_sha256
writes it as `manifest:<hex>`; the manifest holds every shard's sha256). MLflow keeps at most 36
characters of a dataset digest, so the digest is the first 36 hex digits and the whole sha256 is
the input tag `venus.sha256` and part of the profile. The source is resolved by MLflow's own
source registry (a local path, s3://, gs://, ...); a URI it cannot resolve is kept as source type
`external`. Why `MlflowClient.log_inputs` rather than `mlflow.log_input`: stage runs are written
through a client (buffered, outage-tolerant), never through the fluent API's active run.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Dataset, DatasetInput, InputTag
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

MAX_DIGEST = 36  # mlflow.utils.validation.MAX_DATASET_DIGEST_SIZE
MANIFEST_PREFIX = "manifest:"
SHA_TAG = "venus.sha256"
STAGE_TAG = "venus.stage"


def is_dataset_digest(sha256: str) -> bool:
    """True for the digest of a Venus dataset directory (its manifest's sha256)."""
    return sha256.startswith(MANIFEST_PREFIX)


def dataset_name(uri: str) -> str:
    """A short readable name: the last two path parts ('mixture/train', 'scored/web')."""
    parts = [p for p in PurePosixPath(uri.split("://", 1)[-1]).parts if p not in ("/", "")]
    return "/".join(parts[-2:]) or uri


def _source(uri: str) -> tuple[str, str]:
    from mlflow.data.dataset_source_registry import resolve_dataset_source

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "can be interpreted in multiple ways": it picks the local one
            src = resolve_dataset_source(uri)
        return src._get_source_type(), src.to_json()
    except Exception:  # noqa: BLE001 - an unknown scheme: keep the URI as it is
        return "external", json.dumps({"uri": uri})


def dataset_input(uri: str, sha256: str, *, context: str, name: str | None = None,
                  profile: Mapping[str, Any] | None = None, tags: Mapping[str, str] | None = None) -> DatasetInput:
    """A DatasetInput for dataset `uri` with digest `sha256` ('manifest:<hex>' or '<hex>')."""
    full = sha256[len(MANIFEST_PREFIX):] if is_dataset_digest(sha256) else sha256
    source_type, source = _source(uri)
    prof = {"sha256": full, **(profile or {})}
    ds = Dataset(name=name or dataset_name(uri), digest=full[:MAX_DIGEST], source_type=source_type, source=source,
                 profile=json.dumps(prof, sort_keys=True, default=str))
    input_tags = [InputTag(MLFLOW_DATASET_CONTEXT, context), InputTag(SHA_TAG, full)]
    input_tags += [InputTag(k, str(v)) for k, v in (tags or {}).items()]
    return DatasetInput(dataset=ds, tags=input_tags)


def log_dataset_inputs(client: MlflowClient, run_id: str, datasets: Sequence[DatasetInput]) -> None:
    if datasets:
        client.log_inputs(run_id, datasets=list(datasets))


def run_dataset_inputs(client: MlflowClient, run_id: str) -> list[DatasetInput]:
    run = client.get_run(run_id)
    return list(run.inputs.dataset_inputs) if run.inputs is not None else []


def describe(inputs: Iterable[DatasetInput]) -> list[dict[str, str]]:
    """JSON-able summary: name, digest, full sha256, source, context and stage of each input."""
    out = []
    for di in inputs:
        tags = {t.key: t.value for t in di.tags}
        try:
            source = str(json.loads(di.dataset.source).get("uri", di.dataset.source))
        except (ValueError, AttributeError):
            source = di.dataset.source
        out.append({"name": di.dataset.name, "digest": di.dataset.digest, "sha256": tags.get(SHA_TAG, ""),
                    "source": source, "context": tags.get(MLFLOW_DATASET_CONTEXT, ""),
                    "stage": tags.get(STAGE_TAG, "")})
    return out


def copy_dataset_inputs(client: MlflowClient, sources: Mapping[str, str], run_id: str,
                        context: str = "training") -> list[DatasetInput]:
    """Log on `run_id` the dataset inputs of context `context` of the runs `sources` (stage name ->
    run id), once per (name, digest), tagged with the stage they came from; returns what was logged.
    (score_data's raw sources, context "source", and evaluate's data are not a model's training data.)"""
    seen: set[tuple[str, str]] = set()
    copied = []
    for stage, rid in sources.items():
        for di in run_dataset_inputs(client, rid):
            key = (di.dataset.name, di.dataset.digest)
            if key in seen or {t.key: t.value for t in di.tags}.get(MLFLOW_DATASET_CONTEXT) != context:
                continue
            seen.add(key)
            tags = [t for t in di.tags if t.key not in (MLFLOW_DATASET_CONTEXT, STAGE_TAG)]
            copied.append(DatasetInput(dataset=di.dataset, tags=[InputTag(MLFLOW_DATASET_CONTEXT, context),
                                                                 InputTag(STAGE_TAG, stage), *tags]))
    log_dataset_inputs(client, run_id, copied)
    return copied
