"""The agent spec: the one file a platform team edits to make a new GUI agent.

Why one pydantic model: every stage reads its configuration from here and nowhere else
(ARCHITECTURE rule 4). Unknown keys are errors, every field has a default and a one-line
description (the description is what `venus spec template` writes as a YAML comment), and the
names of pluggable pieces are checked against the registries when the spec is loaded.

Departures from the papers: the UI-Venus reports publish reward *formulas* but not weights or
tolerances; the defaults below are ours and are labelled as such in their descriptions.
Coordinates are in the 0–1000 normalized frame throughout (Qwen3-VL convention).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from venus_core.config.registry import registry

STAGES = ("score_data", "mid_train", "offline_rl", "online_rl", "merge", "evaluate")
RL_DOMAINS = ("grounding", "mobile", "web")
DATA_DOMAINS = ("perception", "vqa", "grounding", "navigation")


def _registered(kind: str) -> AfterValidator:
    def check(value: str) -> str:
        reg = registry(kind)
        if value not in reg:
            known = ", ".join(reg.names()) or "(none registered)"
            raise ValueError(f"unknown {kind} name {value!r}; known: {known}")
        return value

    return AfterValidator(check)


RewardName = Annotated[str, _registered("rewards")]
EnvName = Annotated[str, _registered("envs")]
JudgeName = Annotated[str, _registered("judges")]
MergeMethodName = Annotated[str, _registered("merge_methods")]
ImporterName = Annotated[str, _registered("importers")]
EvaluatorName = Annotated[str, _registered("eval_suites")]


class Section(BaseModel):
    """Base of every spec section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


# --------------------------------------------------------------------------- model


class TinyModelSpec(Section):
    vocab_size: int = Field(640, ge=300, description="BPE vocabulary size of the locally trained tokenizer")
    hidden_size: int = Field(128, ge=16, description="text decoder hidden size")
    num_layers: int = Field(2, ge=1, description="text decoder layers")
    num_heads: int = Field(4, ge=1, description="attention heads")
    num_kv_heads: int = Field(2, ge=1, description="key/value heads (GQA)")
    head_dim: int = Field(32, ge=8, description="per-head dimension; mrope sections sum to head_dim/2")
    intermediate_size: int = Field(256, ge=16, description="MLP width")
    vision_depth: int = Field(2, ge=1, description="vision transformer blocks")
    vision_hidden_size: int = Field(64, ge=16, description="vision transformer width")
    patch_size: int = Field(16, ge=2, description="vision patch size in pixels")
    spatial_merge_size: int = Field(2, ge=1, description="patches merged per side into one visual token")
    image_size: int = Field(128, ge=32, description="square screen size the tiny model sees (pixels)")
    seed: int = Field(0, description="seed for weight initialisation and tokenizer training")


class ModelSpec(Section):
    base: str = Field(
        "tiny",
        description="base checkpoint: 'tiny' (embedded default), a local HF directory, or a file:// / s3:// URI",
    )
    architecture: Literal["qwen3_vl", "qwen3_vl_moe", "qwen2_5_vl"] = Field(
        "qwen3_vl", description="Hugging Face model family of the base checkpoint"
    )
    coordinate_frame: Literal["norm1000", "resized_pixels"] = Field(
        "norm1000",
        description="coordinates the model emits: 0–1000 (Qwen3-VL, UI-Venus-1.5) or smart_resize pixels (Qwen2.5-VL, 1.0)",
    )
    min_pixels: int = Field(3136, ge=1, description="lower bound on image pixels after resizing")
    max_pixels: int = Field(12845056, ge=1, description="upper bound on image pixels after resizing")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="weights dtype: auto = bfloat16 on GPU, float32 on CPU"
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = Field(
        "sdpa", description="attention kernel (flash_attention_2 needs the [gpu] extra)"
    )
    tiny: TinyModelSpec = Field(default_factory=TinyModelSpec, description="the embedded tiny model (used when base is 'tiny')")

    @model_validator(mode="after")
    def _pixels(self) -> ModelSpec:
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) > max_pixels ({self.max_pixels})")
        return self


# --------------------------------------------------------------------------- data


class SynthSourceSpec(Section):
    kind: Literal["grounding", "navigation", "vqa", "mixture"] = Field("mixture", description="what to generate")
    n: int = Field(2000, ge=1, description="number of records to generate")
    level: int = Field(0, ge=0, description="curriculum level (see `venus data synth --help`)")
    platform: Literal["mobile", "web", "both"] = Field("both", description="screen layouts to render")
    seed: int = Field(0, description="generator seed (same seed => byte-identical dataset)")


class DataSourceSpec(Section):
    name: str = Field(..., min_length=1, description="source name, used in provenance and reports")
    kind: Literal["synth", "dataset"] = Field(
        "dataset", description="synth = generated by the synthetic GUI world; dataset = read from uri"
    )
    uri: str | None = Field(None, description="dataset location (directory or file:// / s3:// URI) for kind=dataset")
    format: str = Field(
        "venus",
        description="on-disk format of uri: 'venus' (the project's dataset layout) or a registered importer name",
    )
    synth: SynthSourceSpec | None = Field(None, description="generator settings for kind=synth")
    weight: float = Field(1.0, gt=0, description="relative weight of this source inside its domain")

    @model_validator(mode="after")
    def _consistent(self) -> DataSourceSpec:
        if self.kind == "synth":
            if self.synth is None:
                self.synth = SynthSourceSpec()
            if self.uri is not None:
                raise ValueError(f"source {self.name!r}: kind=synth takes no uri")
        else:
            if not self.uri:
                raise ValueError(f"source {self.name!r}: kind=dataset needs a uri")
            if self.synth is not None:
                raise ValueError(f"source {self.name!r}: synth settings only apply to kind=synth")
            if self.format != "venus" and self.format not in registry("importers"):
                known = ", ".join(["venus", *registry("importers").names()])
                raise ValueError(f"source {self.name!r}: unknown format {self.format!r}; known: {known}")
        return self


class MixtureSpec(Section):
    """Domain ratios of the mid-training corpus (UI-Venus-1.5: 20.8 / 22.1 / 24.8 / 32.3 %)."""

    perception: float = Field(0.208, ge=0, le=1, description="semantic perception share")
    vqa: float = Field(0.221, ge=0, le=1, description="GUI-VQA share")
    grounding: float = Field(0.248, ge=0, le=1, description="grounding share")
    navigation: float = Field(0.323, ge=0, le=1, description="navigation reasoning share")

    @model_validator(mode="after")
    def _sums_to_one(self) -> MixtureSpec:
        total = self.perception + self.vqa + self.grounding + self.navigation
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"mixture ratios must sum to 1, got {total:.6f}")
        return self


def _default_sources() -> list[DataSourceSpec]:
    return [DataSourceSpec(name="synth-mixture", kind="synth", synth=SynthSourceSpec())]


class DataSpec(Section):
    sources: list[DataSourceSpec] = Field(default_factory=_default_sources, description="where training data comes from")
    mixture: MixtureSpec = Field(default_factory=MixtureSpec, description="domain ratios honoured per batch")
    validation_fraction: float = Field(0.05, ge=0, lt=1, description="share held out for validation (split by episode)")
    history_len: int = Field(5, ge=0, description="navigation history steps shown in the prompt (UI-Venus: 5)")
    seed: int = Field(0, description="seed for splitting and mixing")

    @model_validator(mode="after")
    def _unique_names(self) -> DataSpec:
        names = [s.name for s in self.sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate source names: {', '.join(dupes)}")
        return self


# --------------------------------------------------------------------------- scoring


class ScoringSpec(Section):
    enabled: bool = Field(True, description="run the data-quality scoring stage")
    judge: JudgeName = Field("rules", description="judge backend: rules (validators only), openai, local")
    endpoint: str | None = Field(None, description="OpenAI-compatible base URL for the openai judge (e.g. a vLLM server)")
    judge_model: str | None = Field(None, description="model name sent to the judge endpoint, or checkpoint for local")
    keep_threshold: int = Field(7, ge=0, le=10, description="score >= this is kept (UI-Venus-1.5: 7)")
    rewrite_threshold: int = Field(4, ge=0, le=10, description="score in [this, keep) is rewritten (UI-Venus-1.5: 4)")
    on_low_score: Literal["rebuild", "discard"] = Field(
        "rebuild", description="below rewrite_threshold: rebuild when the source allows, else discard"
    )
    concurrency: int = Field(8, ge=1, description="judge requests in flight")
    timeout_s: float = Field(60.0, gt=0, description="per-request timeout of the judge")
    max_retries: int = Field(3, ge=0, description="retries with backoff on timeouts, 5xx and rate limits")
    cache: bool = Field(True, description="cache judgements by (sample hash, judge id, prompt version)")
    prompt_version: str = Field("v1", description="judge prompt version (part of the cache key)")

    @model_validator(mode="after")
    def _thresholds(self) -> ScoringSpec:
        if self.rewrite_threshold > self.keep_threshold:
            raise ValueError(
                f"rewrite_threshold ({self.rewrite_threshold}) > keep_threshold ({self.keep_threshold})"
            )
        return self


# --------------------------------------------------------------------------- training


class DistributedSpec(Section):
    backend: Literal["auto", "single", "ddp", "deepspeed"] = Field(
        "auto", description="auto = single process on CPU, DDP under torchrun, DeepSpeed when configured"
    )
    zero_stage: Literal[0, 1, 2, 3] = Field(2, description="DeepSpeed ZeRO stage (backend=deepspeed)")
    nodes: int = Field(1, ge=1, description="nodes of the training job")
    procs_per_node: int = Field(1, ge=1, description="processes (GPUs) per node")
    gradient_checkpointing: bool = Field(False, description="trade compute for activation memory")
    launcher: Literal["in_pod", "trainjob"] = Field(
        "in_pod", description="cluster: torchrun inside the component pod, or a Kubeflow Trainer TrainJob"
    )


class MidTrainSpec(Section):
    enabled: bool = Field(True, description="run mid-training (SFT on the domain mixture)")
    max_steps: int = Field(600, ge=1, description="optimizer steps")
    batch_size: int = Field(16, ge=1, description="samples per optimizer step and process, before accumulation")
    grad_accum: int = Field(1, ge=1, description="gradient accumulation steps")
    lr: float = Field(2e-3, gt=0, description="peak learning rate (AdamW)")
    betas: tuple[float, float] = Field((0.9, 0.98), description="AdamW betas")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    warmup_steps: int = Field(30, ge=0, description="linear warm-up steps")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="cosine schedule floor as a share of lr")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping norm")
    max_seq_len: int = Field(1024, ge=16, description="truncate longer samples (counted, never silent)")
    precision: Literal["auto", "fp32", "bf16"] = Field("auto", description="auto = bf16 on GPU, fp32 on CPU")
    freeze_vision: bool = Field(False, description="freeze the vision tower")
    save_every: int = Field(200, ge=1, description="checkpoint every N steps (atomic, resumable)")
    eval_every: int = Field(100, ge=1, description="held-out evaluation every N steps")
    seed: int = Field(0, description="training seed")
    distributed: DistributedSpec = Field(default_factory=DistributedSpec, description="distributed launch")


class LoraSpec(Section):
    enabled: bool = Field(False, description="train LoRA adapters (peft) instead of full weights")
    r: int = Field(16, ge=1, description="LoRA rank")
    alpha: int = Field(32, ge=1, description="LoRA alpha")
    dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], description="module names to adapt"
    )


class RewardSpec(Section):
    """Reward weights and tolerances. The reports give formulas, not numbers: these defaults are ours."""

    format_weight: float = Field(0.1, ge=0, description="w1: weight of the format reward")
    task_weight: float = Field(0.9, ge=0, description="w2: weight of point-in-box (grounding) or action reward (navigation)")
    coord_tight: float = Field(40.0, gt=0, description="delta2: full coordinate credit within this distance (0–1000 frame)")
    coord_loose: float = Field(80.0, gt=0, description="delta1: half credit within this distance (0–1000 frame)")
    coord_relax_to: float = Field(1.0, ge=1, description="tolerances are multiplied by a factor growing linearly to this over training")
    scroll_tolerance: float = Field(100.0, gt=0, description="delta3: scroll start/end distance tolerance (0–1000 frame)")
    f1_threshold: float = Field(0.5, ge=0, le=1, description="token F1 needed for content credit (Type, CallUser, Finished)")
    alpha: float = Field(1.0, ge=0, description="alpha: coordinate credit of point actions (Click, LongPress, ...)")
    beta: float = Field(1.0, ge=0, description="beta: scroll credit unit (1.5 beta for start, end and direction right)")
    gamma: float = Field(1.0, ge=0, description="gamma: content credit (text, app/url, keys; argument-free actions)")

    @model_validator(mode="after")
    def _tolerances(self) -> RewardSpec:
        if self.coord_tight > self.coord_loose:
            raise ValueError(f"coord_tight ({self.coord_tight}) > coord_loose ({self.coord_loose})")
        return self


class HistoryAlignmentSpec(Section):
    enabled: bool = Field(True, description="UI-Venus-1.0 self-evolving trajectory history alignment")
    rollouts: int = Field(4, ge=1, description="R: rollouts sampled per step to fill the thought pool")
    selection: Literal["closest_length", "random", "highest_reward"] = Field(
        "closest_length", description="which pooled thought replaces a historical one"
    )


class SparseActionSpec(Section):
    enabled: bool = Field(True, description="UI-Venus-1.0 sparse action enhancement")
    actions: list[str] = Field(
        default_factory=lambda: ["LongPress", "CallUser", "PressRecent", "Drag"],
        description="rare but critical action types to up-sample",
    )
    variants: int = Field(4, ge=1, description="M: extra history variants per rare-action sample")


class OfflineRLDomainSpec(Section):
    enabled: bool = Field(True, description="run this offline GRPO job")
    reward: RewardName = Field(..., description="registered reward function of this domain")
    rewards: RewardSpec = Field(default_factory=RewardSpec, description="reward weights and tolerances")
    max_steps: int = Field(200, ge=1, description="GRPO optimizer steps")
    prompts_per_step: int = Field(16, ge=1, description="prompts per step (batch = prompts x group_size)")
    group_size: int = Field(8, ge=2, description="G: completions sampled per prompt (UI-Venus-1.0: 8)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of rollouts")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling of rollouts")
    max_new_tokens: int = Field(64, ge=1, description="completion length limit")
    lr: float = Field(1e-4, gt=0, description="learning rate (UI-Venus-1.0: 4e-7 at 7B)")
    kl_coef: float = Field(4e-3, ge=0, description="KL-to-reference coefficient, k3 estimator (1.0: 4e-3 grounding, 1e-3 navigation)")
    clip_eps: float = Field(0.2, gt=0, description="PPO ratio clip")
    entropy_coef: float = Field(0.0, ge=0, description="entropy bonus coefficient")
    adv_eps: float = Field(1e-6, gt=0, description="epsilon in group-normalized advantages")
    freeze_vision: bool = Field(False, description="freeze the vision tower (UI-Venus-1.0 does for navigation)")
    lora: LoraSpec = Field(default_factory=LoraSpec, description="optional LoRA")
    history_alignment: HistoryAlignmentSpec | None = Field(None, description="navigation only")
    sparse_actions: SparseActionSpec | None = Field(None, description="navigation only")
    seed: int = Field(0, description="seed")


class GroundingRLSpec(OfflineRLDomainSpec):
    reward: RewardName = Field("grounding", description="registered reward function of this domain")
    kl_coef: float = Field(4e-3, ge=0, description="KL-to-reference coefficient, k3 estimator (UI-Venus-1.0: 4e-3)")
    max_new_tokens: int = Field(16, ge=1, description="completion length limit ('[x,y]' is short)")


class MobileRLSpec(OfflineRLDomainSpec):
    reward: RewardName = Field("navigation_mobile", description="registered reward function of this domain")
    kl_coef: float = Field(1e-3, ge=0, description="KL-to-reference coefficient, k3 estimator (UI-Venus-1.0: 1e-3)")
    freeze_vision: bool = Field(True, description="freeze the vision tower (UI-Venus-1.0 does for navigation)")
    max_new_tokens: int = Field(128, ge=1, description="completion length limit")
    history_alignment: HistoryAlignmentSpec | None = Field(
        default_factory=HistoryAlignmentSpec, description="self-evolving history alignment (null = off)"
    )
    sparse_actions: SparseActionSpec | None = Field(
        default_factory=SparseActionSpec, description="sparse action enhancement (null = off)"
    )


class WebRLSpec(MobileRLSpec):
    reward: RewardName = Field("navigation_web", description="registered reward function of this domain")


class OfflineRLSpec(Section):
    grounding: GroundingRLSpec = Field(default_factory=GroundingRLSpec, description="grounding GRPO job")
    mobile: MobileRLSpec = Field(default_factory=MobileRLSpec, description="mobile navigation GRPO job")
    web: WebRLSpec = Field(default_factory=WebRLSpec, description="web navigation GRPO job")


class OnlineRewardSpec(Section):
    completion: float = Field(1.0, description="R_comp: reward of a successful trajectory")
    eta: float = Field(0.9, gt=0, le=1, description="eta: decay for steps beyond the group's fewest (T - T_min)/T_min")
    invalid_penalty: float = Field(0.1, ge=0, description="lambda: penalty per unparseable action")


class AdaptiveKLSpec(Section):
    coef: float = Field(1e-3, ge=0, description="KL coefficient")
    adaptive: bool = Field(True, description="move the reference toward the policy when the policy beats it")
    alpha: float = Field(0.1, gt=0, le=1, description="pi_ref <- (1-alpha) pi_ref + alpha pi_theta")
    margin: float = Field(0.02, ge=0, description="success-rate margin on the held-out set that triggers a move")
    check_every: int = Field(20, ge=1, description="steps between held-out comparisons")


class EntropyScheduleSpec(Section):
    lambda0: float = Field(1e-3, ge=0, description="initial entropy coefficient")
    sigma: float = Field(0.99, gt=0, le=1, description="decay: coefficient = lambda0 * sigma^k")
    every: int = Field(10, ge=1, description="k increases every this many steps")


class TaskPoolSpec(Section):
    size: int = Field(64, ge=1, description="tasks in the pool")
    easy: float = Field(0.5, ge=0, le=1, description="share of easy tasks (<= 10 steps)")
    medium: float = Field(0.35, ge=0, le=1, description="share of medium tasks (11–20 steps)")
    hard: float = Field(0.15, ge=0, le=1, description="share of hard tasks (> 20 steps)")
    dedupe_similarity: float = Field(0.9, gt=0, le=1, description="drop tasks more similar than this")

    @model_validator(mode="after")
    def _shares(self) -> TaskPoolSpec:
        total = self.easy + self.medium + self.hard
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"easy + medium + hard must sum to 1, got {total:.6f}")
        return self


class OnlineRLSpec(Section):
    enabled: bool = Field(False, description="run full-trajectory GRPO on live environments")
    envs: list[EnvName] = Field(default_factory=list, description="registered environment backends")
    task_pool: TaskPoolSpec = Field(default_factory=TaskPoolSpec, description="online task pool")
    max_steps_per_episode: int = Field(30, ge=1, description="step limit per episode (UI-Venus: about 30)")
    group_size: int = Field(8, ge=2, description="trajectories per task")
    steps: int = Field(100, ge=1, description="optimizer steps")
    lr: float = Field(1e-5, gt=0, description="learning rate")
    reward: OnlineRewardSpec = Field(default_factory=OnlineRewardSpec, description="trajectory reward")
    kl: AdaptiveKLSpec = Field(default_factory=AdaptiveKLSpec, description="adaptive KL")
    entropy: EntropyScheduleSpec = Field(default_factory=EntropyScheduleSpec, description="annealed entropy bonus")
    success: Literal["rules", "judge"] = Field("rules", description="success from system-state rules or an MLLM judge")

    @model_validator(mode="after")
    def _envs_when_enabled(self) -> OnlineRLSpec:
        if self.enabled and not self.envs:
            raise ValueError("online_rl.enabled needs at least one env")
        return self


# --------------------------------------------------------------------------- merge / eval


class MergeSpec(Section):
    method: MergeMethodName = Field("ties", description="merge method of the published checkpoint")
    weights: dict[str, float] = Field(
        default_factory=lambda: {"grounding": 1.0, "mobile": 1.0, "web": 1.0},
        description="weight per specialist (keys: grounding, mobile, web)",
    )
    density: float = Field(0.2, gt=0, le=1, description="TIES: share of task-vector entries kept")
    lambda_: float = Field(1.0, alias="lambda", gt=0, description="scale of the merged task vector")
    sign_election: Literal["mass", "weighted_mass", "count"] = Field("mass", description="TIES sign election")
    trim_scope: Literal["tensor", "model"] = Field("tensor", description="TIES trim threshold per tensor or across the whole model")
    compare: list[str] = Field(
        default_factory=lambda: ["ties", "linear", "best_single"],
        description="candidates evaluated on the quick eval set before publishing",
    )

    @model_validator(mode="after")
    def _keys(self) -> MergeSpec:
        bad = sorted(set(self.weights) - set(RL_DOMAINS))
        if bad:
            raise ValueError(f"merge.weights: unknown specialist(s) {bad}; known: {list(RL_DOMAINS)}")
        methods = registry("merge_methods")
        for candidate in self.compare:
            if candidate != "best_single" and candidate not in methods:
                known = ", ".join(["best_single", *methods.names()])
                raise ValueError(f"merge.compare: unknown candidate {candidate!r}; known: {known}")
        return self


class EvalSuiteSpec(Section):
    name: str = Field(..., min_length=1, description="suite name in reports")
    evaluator: EvaluatorName = Field(..., description="registered evaluator")
    data: str | None = Field(None, description="dataset directory / URI (offline suites)")
    limit: int | None = Field(None, ge=1, description="evaluate at most this many samples / episodes")


class EvalSpec(Section):
    suites: list[EvalSuiteSpec] = Field(default_factory=list, description="what the evaluate stage runs")
    batch_size: int = Field(16, ge=1, description="inference batch size")
    temperature: float = Field(0.0, ge=0, description="decoding temperature (UI-Venus: 0)")
    repetition_penalty: float = Field(1.05, gt=0, description="decoding repetition penalty (UI-Venus: 1.05)")
    held_out: int = Field(200, ge=1, description="held-out synthetic samples per domain for learning checks")


# --------------------------------------------------------------------------- platform


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
    score_data: ResourceSpec = Field(default_factory=ResourceSpec, description="score_data pods")
    mid_train: ResourceSpec = Field(default_factory=ResourceSpec, description="mid_train pods")
    offline_rl: ResourceSpec = Field(default_factory=ResourceSpec, description="each offline_rl pod")
    online_rl: ResourceSpec = Field(default_factory=ResourceSpec, description="online_rl pods")
    merge: ResourceSpec = Field(default_factory=ResourceSpec, description="merge pod")
    evaluate: ResourceSpec = Field(default_factory=ResourceSpec, description="evaluate pod")


class ImagesSpec(Section):
    base: str = Field("venus/base:latest", description="CPU image with the project (all CPU stages)")
    train: str = Field("venus/train-gpu:latest", description="CUDA + DeepSpeed training image")
    rollout: str = Field("venus/rollout-vllm:latest", description="vLLM rollout / judge image")
    env_web: str = Field("venus/env-web:latest", description="headless Chromium environment image")


class PlatformSpec(Section):
    tracking_uri: str = Field("sqlite:///runs/mlflow.db", description="MLflow tracking URI")
    experiment: str = Field("venus", description="MLflow experiment name")
    artifact_store: str = Field("file://runs/artifacts", description="artifact root: file://DIR or s3://BUCKET/PREFIX")
    s3_endpoint: str | None = Field(None, description="S3/MinIO endpoint URL (credentials come from a Secret)")
    storage_secret: str = Field("venus-minio", description="Kubernetes Secret with MinIO credentials")
    tracking_secret: str | None = Field(None, description="Kubernetes Secret with MLflow credentials, if any")
    namespace: str = Field("venus", description="Kubernetes namespace of the pipeline")
    kfp_host: str | None = Field(None, description="Kubeflow Pipelines API URL for `venus submit`")
    checkpoints_pvc: str | None = Field(None, description="PVC mounted at /checkpoints in training pods")
    images: ImagesSpec = Field(default_factory=ImagesSpec, description="container images (names or digests)")
    resources: StageResources = Field(default_factory=StageResources, description="resources per stage")


# --------------------------------------------------------------------------- the spec

_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")


class AgentSpec(Section):
    """One GUI agent: its base model, data, the training stages and where it runs."""

    name: str = Field("venus-agent", description="agent name: lowercase letters, digits, '.', '_' and '-'")
    description: str = Field("", description="free text shown in the Kubeflow UI and MLflow")
    spec_version: Literal[1] = Field(1, description="version of this file's schema")
    model: ModelSpec = Field(default_factory=ModelSpec, description="base model")
    data: DataSpec = Field(default_factory=DataSpec, description="training data and mixture")
    scoring: ScoringSpec = Field(default_factory=ScoringSpec, description="data-quality scoring")
    mid_train: MidTrainSpec = Field(default_factory=MidTrainSpec, description="mid-training")
    offline_rl: OfflineRLSpec = Field(default_factory=OfflineRLSpec, description="offline GRPO jobs")
    online_rl: OnlineRLSpec = Field(default_factory=OnlineRLSpec, description="online RL")
    merge: MergeSpec = Field(default_factory=MergeSpec, description="merging the specialists")
    eval: EvalSpec = Field(default_factory=EvalSpec, description="evaluation")
    platform: PlatformSpec = Field(default_factory=PlatformSpec, description="where it runs")

    @model_validator(mode="after")
    def _name(self) -> AgentSpec:
        if not _NAME.match(self.name):
            raise ValueError(
                f"name {self.name!r} must be 1–63 lowercase letters, digits, '.', '_' or '-', "
                "starting and ending with a letter or digit"
            )
        return self
