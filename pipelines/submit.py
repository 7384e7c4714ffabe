"""Submit an agent spec's pipeline to a Kubeflow Pipelines API server (`venus submit`).

Why upload a version first instead of `create_run_from_pipeline_package`: a run started from an
inline package leaves nothing behind in the Pipelines page; uploading makes the pipeline (named
after the agent) and one version per submission (named by spec hash and time) that the UI lists,
diffs and can re-run. The run then references that version, in the requested experiment
(default: `platform.experiment`), in the spec's namespace, as `platform.service_account` when the spec
names one: the IR has no place for a service account (kfp-kubernetes sets per-task pod settings,
not the identity), so it is a setting of the run, as in the Kubeflow UI's *Create run* form.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kfp import compiler

from pipelines.gui_agent import build_pipeline
from venus_core.config import load_spec, spec_hash


@dataclass(frozen=True)
class Submission:
    run_id: str
    url: str
    pipeline_id: str
    version_id: str
    experiment_id: str


def _client(host: str, namespace: str) -> Any:
    import kfp

    return kfp.Client(host=host, namespace=namespace)


def submit(agent: str | Path, host: str, *, experiment: str | None = None, overrides: Sequence[str] = (),
           run_name: str | None = None, client_factory: Callable[[str, str], Any] = _client) -> Submission:
    """Compile, upload (pipeline + version), create the run; return its id and UI URL."""
    spec = load_spec(agent, overrides)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    version_name = f"{spec.name}-{spec_hash(spec)[:12]}-{stamp}"
    client = client_factory(host, spec.platform.namespace)
    with tempfile.TemporaryDirectory(prefix="venus-submit-") as tmp:
        package = str(Path(tmp) / f"{spec.name}.yaml")
        compiler.Compiler().compile(build_pipeline(spec), package)
        pipeline_id = client.get_pipeline_id(spec.name)
        if pipeline_id is None:
            pipeline = client.upload_pipeline(package, pipeline_name=spec.name,
                                              description=spec.description or None,
                                              namespace=spec.platform.namespace)
            pipeline_id = pipeline.pipeline_id
        version = client.upload_pipeline_version(package, pipeline_version_name=version_name,
                                                 pipeline_id=pipeline_id)
    exp = client.create_experiment(experiment or spec.platform.experiment, namespace=spec.platform.namespace)
    run = client.run_pipeline(exp.experiment_id, run_name or f"{spec.name} {stamp}",
                              pipeline_id=pipeline_id, version_id=version.pipeline_version_id,
                              service_account=spec.platform.service_account)
    url = f"{host.rstrip('/')}/#/runs/details/{run.run_id}"
    return Submission(run_id=run.run_id, url=url, pipeline_id=pipeline_id,
                      version_id=version.pipeline_version_id, experiment_id=exp.experiment_id)
