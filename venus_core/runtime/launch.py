"""Where a training job runs: in the component's pod, or as a Kubeflow Trainer TrainJob.

    python -m venus_core.runtime.launch mid_train --spec AGENT --data DIR --out DIR [--set k=v ...]

The training components call this instead of the job module, and it follows the spec:

* `distributed.launcher: in_pod` (the default): the job runs in this pod, as one process or, with
  `procs_per_node > 1`, under torchrun over the pod's GPUs. More than one node needs a TrainJob.
* `distributed.launcher: trainjob`: the job runs as a TrainJob (`venus_core.io.trainjob`) with the
  spec's node count, processes per node, backend (DeepSpeed or torch runtime), the stage's
  resources and the train image. The TrainJob's pods cannot see this pod's KFP input artifacts, so
  they meet on the checkpoints PVC (`platform.checkpoints_pvc`, mounted at /checkpoints here and in
  the Trainer runtimes): the inputs are staged under `/checkpoints/<run>/<job>/inputs` (copied once
  per run; a marker says a copy is whole), the job writes `/checkpoints/<run>/<job>/out`, and
  after `Complete` the outputs are copied into this pod's output artifact.

Resume after a restart: inside a Kubeflow run with a checkpoints PVC, checkpointing jobs get
`--checkpoints /checkpoints/<KFP run id>/<job>`; a retried pod of the same run finds the last
checkpoint there and continues from it (the job's exact resume, venus_core.train.checkpoint).
Jobs with a `distributed` section: mid_train (`mid_train.distributed`) and the three offline_rl
jobs (`offline_rl.distributed`, one section for all domains: venus_core.rl.distributed); the
TrainJob of an offline_rl job stages its `--model`, `--data` / `--data-root`, `--eval-data` and
`--exclude` inputs on the PVC as mid_train stages its `--data`. online_rl always runs in the pod
(its learner, `rl.online.learner`, is one process).

Online RL with a rollout server: the learner's weights must be readable by the server, so
in such a run `online_rl` also gets `--weights-dir /checkpoints/<KFP run id>/<job>/weights`, on the
same PVC, which the rollout servers mount read-only at the same path
(manifests/overlays/gpu-cluster/vllm-rollout.yaml).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from venus_core.config import AgentSpec, load_spec
from venus_core.config.training import DistributedSpec, RLDistributedSpec
from venus_core.runtime.tracking import KFP_RUN_ENV, PARENT_ENV, TRACKING_ENV

CHECKPOINTS_MOUNT = Path("/checkpoints")  # pipelines/k8s.py mounts platform.checkpoints_pvc here
CHECKPOINTED_JOBS = ("mid_train", "offline_rl", "online_rl")
STAGED = ".venus-staged"
STAGED_INPUTS = ("--data", "--data-root", "--model", "--eval-data", "--exclude")
"""Path arguments of the training jobs that a TrainJob's pods must find on the PVC."""
PASS_ENV = (KFP_RUN_ENV, PARENT_ENV, TRACKING_ENV, "VENUS_GIT_REV", "VENUS_IMAGE", "VENUS_MODEL_CACHE")


def _known(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--spec", required=True)
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--out", required=True)
    for flag in STAGED_INPUTS:
        p.add_argument(flag, action="append", default=[])
    p.add_argument("--domain", default=None)
    p.add_argument("--checkpoints", default=None)
    return p.parse_known_args(list(argv))[0]


def job_key(job: str, domain: str | None) -> str:
    return f"{job}-{domain}" if domain else job


def checkpoint_dir(spec: AgentSpec, key: str) -> Path | None:
    """`/checkpoints/<KFP run id>/<key>`, when the spec mounts a checkpoints PVC and this is a KFP run."""
    run = os.environ.get(KFP_RUN_ENV)
    if not spec.platform.checkpoints_pvc or not run:
        return None
    return CHECKPOINTS_MOUNT / run / key / "checkpoints"


def distributed_of(spec: AgentSpec, job: str) -> DistributedSpec | RLDistributedSpec | None:
    """The job's `distributed` section: mid_train's, offline_rl's (all three domains), else None."""
    if job == "mid_train":
        return spec.mid_train.distributed
    if job == "offline_rl":
        return spec.offline_rl.distributed
    return None


def run_in_pod(job: str, argv: Sequence[str], dist: DistributedSpec | RLDistributedSpec | None) -> int:
    if dist is not None and dist.nodes > 1:
        raise ValueError(f"{job}.distributed.nodes={dist.nodes} with launcher=in_pod: one pod is one node; "
                         f"set {job}.distributed.launcher=trainjob for multi-node training")
    if dist is not None and dist.procs_per_node > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={dist.procs_per_node}", "-m", f"venus_core.runtime.{job}", *argv]
        print(f"[launch] {' '.join(cmd)}", file=sys.stderr, flush=True)
        return subprocess.run(cmd, check=False).returncode
    module = importlib.import_module(f"venus_core.runtime.{job}")
    return int(module.main(list(argv)))


def _stage_copy(src: Path, dest: Path) -> None:
    """Copy a file or directory once: a marker written last says the copy is whole."""
    marker = dest.parent / f"{dest.name}{STAGED}"
    if marker.is_file():
        return
    if dest.exists():
        shutil.rmtree(dest) if dest.is_dir() else dest.unlink()
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dest)
    else:
        shutil.copy2(src, dest)
    marker.write_text(str(src), encoding="utf-8")


def _rewrite(argv: Sequence[str], flag: str, values: list[str]) -> list[str]:
    """Replace the values of `flag` (given as `--flag V` or `--flag=V`) in order."""
    out, it = [], iter(values)
    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        if a == flag:
            out += [a, next(it)]
            i += 2
            continue
        if a.startswith(flag + "="):
            out.append(f"{flag}={next(it)}")
        else:
            out.append(a)
        i += 1
    return out


def trainjob_name(job: str, stage: Path) -> str:
    digest = hashlib.sha256(str(stage).encode()).hexdigest()[:10]
    return f"venus-{job.replace('_', '-')}-{digest}"


def run_trainjob(job: str, argv: Sequence[str], spec: AgentSpec, dist: DistributedSpec | RLDistributedSpec, key: str,
                 api: object | None = None) -> int:
    from venus_core.io.trainjob import TrainJobError, TrainJobLauncher, api_from_environment, runtime_for
    from venus_core.io.trainjob import trainjob_manifest

    if not spec.platform.checkpoints_pvc:
        raise ValueError(f"{job}.distributed.launcher=trainjob needs platform.checkpoints_pvc: the TrainJob's pods "
                         "read their inputs and write their outputs on that volume")
    known = _known(argv)
    run = os.environ.get(KFP_RUN_ENV) or f"local-{uuid.uuid4().hex[:12]}"
    stage = CHECKPOINTS_MOUNT / run / key
    _stage_copy(Path(known.spec), stage / "inputs" / "agent_spec.yaml")
    args = _rewrite(argv, "--spec", [str(stage / "inputs" / "agent_spec.yaml")])
    for flag in STAGED_INPUTS:  # --data: inputs/data-0, ...; --model: inputs/model-0; ...
        staged = []
        for i, d in enumerate(getattr(known, flag[2:].replace("-", "_"))):
            dest = stage / "inputs" / f"{flag[2:]}-{i}"
            _stage_copy(Path(d), dest)
            staged.append(str(dest))
        args = _rewrite(args, flag, staged)
    args = _rewrite(args, "--out", [str(stage / "out")])
    if known.checkpoints is None:
        args += ["--checkpoints", str(stage / "checkpoints")]
    env = {k: os.environ[k] for k in PASS_ENV if os.environ.get(k)}
    body = trainjob_manifest(trainjob_name(job, stage), spec.platform.namespace, spec.platform.images.train,
                             f"venus_core.runtime.{job}", args, nodes=dist.nodes, procs_per_node=dist.procs_per_node,
                             runtime=runtime_for(dist.backend), resources=getattr(spec.platform.resources, job),
                             env=env, labels={"venus.dev/job": job, "venus.dev/agent": spec.name})
    launcher = TrainJobLauncher(api or api_from_environment(), spec.platform.namespace,  # type: ignore[arg-type]
                                on_event=lambda kind, obj: print(f"[launch] TrainJob {obj['metadata']['name']}: "
                                                                 f"{kind}", file=sys.stderr, flush=True))
    print(f"[launch] {job} as TrainJob {body['metadata']['name']} ({dist.nodes} x {dist.procs_per_node}, "
          f"{body['spec']['runtimeRef']['name']}), staged in {stage}", file=sys.stderr, flush=True)
    try:
        result = launcher.run(body, timeout_s=dist.timeout_s)
    except TrainJobError as exc:
        print(f"[launch] {job}: {exc}", file=sys.stderr, flush=True)
        return 1
    out = Path(known.out)
    out.mkdir(parents=True, exist_ok=True)
    produced = stage / "out"
    if not produced.is_dir():
        print(f"[launch] {job}: TrainJob {result.name} completed but wrote nothing to {produced}", file=sys.stderr)
        return 1
    shutil.copytree(produced, out, dirs_exist_ok=True)
    print(f"[launch] {job}: TrainJob {result.name} complete in {result.seconds} s; outputs copied to {out}",
          file=sys.stderr, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        print("usage: python -m venus_core.runtime.launch JOB [job arguments]", file=sys.stderr)
        return 2
    job, rest = args[0], args[1:]
    known = _known(rest)
    spec = load_spec(known.spec, known.overrides)
    key = job_key(job, known.domain)
    dist = distributed_of(spec, job)
    if dist is not None and dist.launcher == "trainjob":
        return run_trainjob(job, rest, spec, dist, key)
    ckpt = checkpoint_dir(spec, key)
    if ckpt is not None and job in CHECKPOINTED_JOBS and known.checkpoints is None:
        rest += ["--checkpoints", str(ckpt)]
    if ckpt is not None and job == "online_rl" and spec.online_rl.rollout_server and not _has(rest, "--weights-dir"):
        rest += ["--weights-dir", str(ckpt.parent / "weights")]  # the rollout server mounts the PVC too
    return run_in_pod(job, rest, dist)


def _has(argv: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


if __name__ == "__main__":
    sys.exit(main())
