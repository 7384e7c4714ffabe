"""Kubernetes settings of each pipeline task, from the agent spec's `platform` section.

Why a separate module: the pipeline graph (gui_agent.py) says *what* runs; this says *where* and
with what, from `platform.resources.<stage>` and the secret / PVC names. Everything goes through
kfp-kubernetes, so it lands in the compiled IR's platform spec and the KFP backend applies it;
`kfp.local` ignores it.

Choices of ours: GPUs are requested as the `nvidia.com/gpu` extended resource; `gpu_type` becomes
the pod label `venus.dev/gpu-type` (for quotas and cost attribution) while placement is left to
`node_selector` / `tolerations`, because the product label values of GPU feature discovery
(`NVIDIA-H100-80GB-HBM3`) do not match the short names users write (`H100`). Credentials only ever
arrive as environment variables from Secrets (never as pipeline parameters, never in the spec):
the storage Secret when artifacts live in S3 / MinIO, the tracking Secret when the spec names one,
and for score_data (and generate_data when the flywheel judges, online_rl when `online_rl.success`
asks for the judge) with the `openai` judge the Secret
`scoring.api_key_secret` (key VENUS_JUDGE_API_KEY, which the judge client sends and the `vllm` judge
server checks).
With `platform.device_registry`, the pods that lease devices through the gateway (online_rl per
domain, generate_data; `leases_devices`) get it as $VENUS_DEVICE_REGISTRY, the client certificate
Secret `platform.device_client_secret` mounted read-only with VENUS_DAAS_CA / _CERT / _KEY pointing at
its files (its common name is the client id the registry binds leases to) and the label
`venus.dev/device-client: "true"` the gateway's NetworkPolicy admits.
The online_rl pods of a spec with a rollout server carry the label `venus.dev/rollout-client: "true"`:
the rollout servers' dev-mode weight routes are unauthenticated, and their NetworkPolicy
(manifests/overlays/gpu-cluster/vllm-rollout.yaml) admits only pods with that label.
Two settings are the pipeline's, not a task's: the pipeline root (`pipeline_root`, the spec's
`s3://` artifact store, so that the tasks' outputs land in MinIO rather than KFP's default store)
and the ServiceAccount, which the IR cannot carry and `venus submit` sets on the run
(pipelines/submit.py).
"""

from __future__ import annotations

from typing import Any

from kfp import kubernetes

from venus_core.config import AgentSpec
from venus_core.config.platform import ResourceSpec

GPU_RESOURCE = "nvidia.com/gpu"
GPU_TYPE_LABEL = "venus.dev/gpu-type"
CHECKPOINTS_MOUNT = "/checkpoints"
SHM_VOLUME = "dshm"
STORAGE_KEYS = {"AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY"}
TRACKING_KEYS = {"MLFLOW_TRACKING_USERNAME": "MLFLOW_TRACKING_USERNAME",
                 "MLFLOW_TRACKING_PASSWORD": "MLFLOW_TRACKING_PASSWORD"}
JUDGE_KEYS = {"VENUS_JUDGE_API_KEY": "VENUS_JUDGE_API_KEY"}  # venus_core.scoring.openai_judge.API_KEY_ENV
TRAINING_STAGES = ("mid_train", "offline_rl", "online_rl")
MODEL_CACHE_ENV = "VENUS_MODEL_CACHE"  # venus_core.runtime.base_model reads it
KFP_RUN_ENV = "KFP_RUN_ID"  # venus_core.runtime.tracking.KFP_RUN_ENV
ROLLOUT_CLIENT_LABEL = ("venus.dev/rollout-client", "true")  # the rollout servers' NetworkPolicy admits these pods
DEVICE_CLIENT_LABEL = ("venus.dev/device-client", "true")  # the gateway's NetworkPolicy admits these pods
DEVICE_CLIENT_MOUNT = "/etc/venus/device-client"
REGISTRY_ENV = "VENUS_DEVICE_REGISTRY"  # venus_core.runtime.online_rl.REGISTRY_ENV
DAAS_FILES = {"VENUS_DAAS_CA": "ca.crt", "VENUS_DAAS_CERT": "tls.crt", "VENUS_DAAS_KEY": "tls.key"}  # daas/tls.py
RUN_ID_FIELD = "metadata.labels['pipeline/runid']"  # set on every pod of a run by the KFP API server


def uses_object_store(spec: AgentSpec) -> bool:
    return spec.platform.artifact_store.startswith("s3://") or spec.platform.s3_endpoint is not None


def pipeline_root(spec: AgentSpec) -> str | None:
    """Where the KFP backend stores the tasks' outputs: the spec's `s3://` artifact store (MinIO),
    or None (KFP's default store) for a `file://` one, which no cluster pod can reach. `kfp.local`
    ignores it and keeps using its own root under the run directory."""
    store = spec.platform.artifact_store
    return store.rstrip("/") if store.startswith("s3://") else None


def apply_resources(task: Any, res: ResourceSpec) -> None:
    """CPU / memory requests = limits (guaranteed QoS for training), GPUs, placement, /dev/shm."""
    task.set_cpu_request(res.cpu).set_cpu_limit(res.cpu)
    task.set_memory_request(res.memory).set_memory_limit(res.memory)
    if res.gpu_count:
        task.set_accelerator_type(GPU_RESOURCE).set_accelerator_limit(res.gpu_count)
    if res.gpu_type:
        kubernetes.add_pod_label(task, GPU_TYPE_LABEL, res.gpu_type)
    for key, value in sorted(res.node_selector.items()):
        kubernetes.add_node_selector(task, key, value)
    for tol in res.tolerations:
        kubernetes.add_toleration(task, key=tol.key, operator=tol.operator, value=tol.value, effect=tol.effect)
    if res.shm_size:
        kubernetes.empty_dir_mount(task, SHM_VOLUME, "/dev/shm", medium="Memory", size_limit=res.shm_size)


def loads_remote_base(stage: str, spec: AgentSpec) -> bool:
    """Whether `stage` loads an object-store model.base (`venus_core.runtime.base_model`): mid_train,
    the evaluate stage's `base` row, generate_data's default policy."""
    if not spec.model.base.startswith(("s3://", "file://")):
        return False
    return (stage == "mid_train" or (stage == "evaluate" and "base" in spec.eval.baselines)
            or (stage == "generate_data" and spec.flywheel.policy == "model" and not spec.flywheel.policy_server))


def leases_devices(stage: str, spec: AgentSpec, domain: str | None = None) -> bool:
    """Whether the pod of `stage` (`domain`: online_rl's) leases its devices from the cluster's
    registry (`platform.device_registry`): it plays through the gateway and the pool serves its domain."""
    if stage == "generate_data" and spec.flywheel.enabled:
        domain = "web" if spec.flywheel.env == "miniwob" else "mobile"
    elif stage != "online_rl":
        return False
    return (bool(spec.platform.device_registry) and domain in spec.platform.device_domains
            and spec.online_rl.service_of(domain) == "gateway")


def apply_platform(task: Any, stage: str, spec: AgentSpec, domain: str | None = None) -> None:
    """Resources of `stage`, endpoints as plain env, credentials from Secrets, the checkpoint PVC;
    for a pod that leases devices (`leases_devices`), the registry, the client certificate and the label."""
    p = spec.platform
    apply_resources(task, getattr(p.resources, stage))
    if p.s3_endpoint:
        task.set_env_variable("MLFLOW_S3_ENDPOINT_URL", p.s3_endpoint)
        task.set_env_variable("AWS_ENDPOINT_URL", p.s3_endpoint)
    if uses_object_store(spec):
        kubernetes.use_secret_as_env(task, p.storage_secret, STORAGE_KEYS)
    if p.tracking_secret:
        kubernetes.use_secret_as_env(task, p.tracking_secret, TRACKING_KEYS, optional=True)
    judge, fw = spec.scoring, spec.flywheel
    judged = ((stage == "score_data" and judge.enabled)
              or (stage == "generate_data" and (fw.judge or fw.verifier == "judge"))
              or (stage == "online_rl" and spec.online_rl.success != "rules"))
    if judged and judge.judge == "openai" and judge.api_key_secret:
        kubernetes.use_secret_as_env(task, judge.api_key_secret, JUDGE_KEYS)
    cache_base = bool(p.checkpoints_pvc) and loads_remote_base(stage, spec)
    if p.checkpoints_pvc and (stage in TRAINING_STAGES or cache_base):
        kubernetes.mount_pvc(task, p.checkpoints_pvc, CHECKPOINTS_MOUNT)
    if cache_base:  # an s3:// model.base is fetched once onto the PVC, not into each pod's ephemeral disk
        task.set_env_variable(MODEL_CACHE_ENV, f"{CHECKPOINTS_MOUNT}/models")
    if stage == "online_rl" and spec.online_rl.rollout_server:
        kubernetes.add_pod_label(task, *ROLLOUT_CLIENT_LABEL)
    if leases_devices(stage, spec, domain):
        task.set_env_variable(REGISTRY_ENV, p.device_registry)
        kubernetes.use_secret_as_volume(task, p.device_client_secret, DEVICE_CLIENT_MOUNT)
        for env, name in DAAS_FILES.items():
            task.set_env_variable(env, f"{DEVICE_CLIENT_MOUNT}/{name}")
        kubernetes.add_pod_label(task, *DEVICE_CLIENT_LABEL)
    # The Kubeflow run id, for MLflow nesting and per-run checkpoint directories; from the pod's
    # label rather than a component input, which would change every run and defeat caching.
    kubernetes.use_field_path_as_env(task, KFP_RUN_ENV, RUN_ID_FIELD)
