"""Agent spec section `platform`: where the pipeline runs (tracking, artifacts, images, resources)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from venus_core.config.base import Section

class Toleration(Section):
    key: str = Field(..., description="taint key")
    operator: Literal["Equal", "Exists"] = Field("Exists", description="toleration operator")
    value: str | None = Field(None, description="taint value for operator=Equal")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(None, description="taint effect")


class ResourceSpec(Section):
    cpu: str = Field("1", description="CPU request/limit (Kubernetes quantity)")
    memory: str = Field("4Gi", description="memory request/limit (Kubernetes quantity)")
    gpu_type: str | None = Field(None, description="accelerator type, e.g. nvidia.com/gpu node label value 'H100'")
    gpu_count: int = Field(0, ge=0, description="GPUs per pod")
    shm_size: str | None = Field(None, description="size of a memory-backed /dev/shm volume (e.g. '16Gi')")
    node_selector: dict[str, str] = Field(default_factory=dict, description="node selector labels")
    tolerations: list[Toleration] = Field(default_factory=list, description="tolerations")

    @model_validator(mode="after")
    def _gpu(self) -> ResourceSpec:
        if self.gpu_type and self.gpu_count == 0:
            raise ValueError(f"gpu_type {self.gpu_type!r} given with gpu_count 0")
        return self


class StageResources(Section):
    generate_data: ResourceSpec = Field(default_factory=ResourceSpec, description="generate_data pod (flywheel)")
    score_data: ResourceSpec = Field(default_factory=ResourceSpec, description="score_data pods")
    mid_train: ResourceSpec = Field(default_factory=ResourceSpec, description="mid_train pods")
    offline_rl: ResourceSpec = Field(default_factory=ResourceSpec, description="each offline_rl pod")
    online_rl: ResourceSpec = Field(default_factory=ResourceSpec, description="online_rl pods")
    merge: ResourceSpec = Field(default_factory=ResourceSpec, description="merge pod")
    evaluate: ResourceSpec = Field(default_factory=ResourceSpec, description="evaluate pod")


class ImagesSpec(Section):
    base: str = Field("venus/base:0.1.0", description="CPU image with the project (all CPU stages)")
    train: str = Field("venus/train-gpu:0.1.0", description="CUDA + DeepSpeed training image")
    rollout: str = Field("venus/rollout-vllm:0.1.0", description="vLLM rollout / judge image")
    env_web: str = Field("venus/env-web:0.1.0", description="headless Chromium environment image")


class PlatformSpec(Section):
    tracking_uri: str = Field("sqlite:///runs/mlflow.db", description="MLflow tracking URI")
    experiment: str = Field("venus", description="MLflow experiment name")
    artifact_store: str = Field("file://runs/artifacts", description="artifact root: file://DIR or s3://BUCKET/PREFIX")
    s3_endpoint: str | None = Field(None, description="S3/MinIO endpoint URL (credentials come from a Secret)")
    storage_secret: str = Field("venus-minio", description="Kubernetes Secret with MinIO credentials")
    tracking_secret: str | None = Field(None, description="Kubernetes Secret with MLflow credentials, if any")
    namespace: str = Field("venus", description="Kubernetes namespace of the pipeline")
    service_account: str | None = Field(
        None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=253,
        description="ServiceAccount the run's pods use, set on the run by `venus submit` (none: the namespace's default)")
    kfp_host: str | None = Field(None, description="Kubeflow Pipelines API URL for `venus submit`")
    checkpoints_pvc: str | None = Field(None, description="PVC mounted at /checkpoints in training pods")
    device_registry: str | None = Field(
        None, pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="lease registry URL of the cluster's device pool (e.g. "
        "https://device-gateway.venus.svc.cluster.local:7070): set as $VENUS_DEVICE_REGISTRY in the pods that lease "
        "devices through the gateway (online_rl, generate_data) for `device_domains`; none: those jobs start a farm "
        "of simulated phones / Chromium processes in their own pod")
    device_domains: list[Literal["mobile", "web"]] = Field(
        default_factory=lambda: ["mobile", "web"],
        description="domains whose devices the registry's pool serves (mobile: simulated phones answering "
        "`venus-load`; web: browser pods); the other domains keep their in-pod farm")
    device_client_secret: str = Field(
        "venus-device-client", description="Secret with the device-service client certificate (tls.crt, tls.key, "
        "ca.crt), mounted read-only where device_registry is used; VENUS_DAAS_CA / _CERT / _KEY point at its files")
    images: ImagesSpec = Field(default_factory=ImagesSpec, description="container images (names or digests)")
    resources: StageResources = Field(default_factory=StageResources, description="resources per stage")
