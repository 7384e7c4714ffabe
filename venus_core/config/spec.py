"""The agent spec: the one file a platform team edits to make a new GUI agent.

Why one pydantic model: every stage reads its configuration from here and nowhere else
(docs/architecture.md, rule 4). Unknown keys are errors, every field has a default and a one-line
description (the description is what `venus spec template` writes as a YAML comment), and the
names of pluggable pieces are checked against the registries when the spec is loaded.

Departures from the papers: the UI-Venus reports publish reward *formulas* but not weights or
tolerances; the defaults below are ours and are labelled as such in their descriptions.
Coordinates are in the 0–1000 normalized frame throughout (Qwen3-VL convention).
"""

from __future__ import annotations
import re
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from venus_core.config.base import (  # noqa: F401 - re-exported
    DATA_DOMAINS,
    RL_DOMAINS,
    STAGES,
    TRAINED_MERGE_METHODS,
    EnvName,
    EvaluatorName,
    ImporterName,
    JudgeName,
    MergeMethodName,
    RewardName,
    Section,
)
from venus_core.config.flywheel import FlywheelSpec
from venus_core.config.platform import (  # noqa: F401 - re-exported
    ImagesSpec,
    PlatformSpec,
    ResourceSpec,
    StageResources,
    Toleration,
)
from venus_core.config.registry import registry
from venus_core.config.training import (  # noqa: F401 - re-exported
    AdaptiveKLSpec,
    DistributedSpec,
    EntropyScheduleSpec,
    GroundingRLSpec,
    HistoryAlignmentSpec,
    LoraSpec,
    MidTrainSpec,
    MobileRLSpec,
    OfflineRLDomainSpec,
    OfflineRLSpec,
    OnlineRewardSpec,
    OnlineRLSpec,
    RewardSpec,
    SparseActionSpec,
    TaskPoolSpec,
    WebRLSpec,
)

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
    vision_pos_init_std: float = Field(
        3.0,
        ge=0.0,
        description="std of the vision tower's learned position table at init (transformers' default "
        "0.02 hides position from the text model: see docs/learning.md)",
    )
    merger_output_gain: float = Field(
        100.0,
        gt=0.0,
        description="factor on the visual merger's output layer at init, so image tokens start at "
        "about the scale of a trained model's (see docs/learning.md)",
    )
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
        "auto", description="weights dtype: auto = bfloat16 on GPU, float32 on CPU and for trained (master) weights"
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
    refusal_share: float = Field(
        0.10, ge=0, le=1,
        description="share of grounding samples naming an element absent from the screen (answer [-1,-1])",
    )


TRAINING_SEED_END = 100000
"""Training page / task seeds stay below this (collected episodes here, online RL's pool:
`venus_core.rl.online.sources.TRAIN_SEEDS`); online evaluation targets start at it."""


class CollectSourceSpec(Section):
    """Oracle episodes played in a live environment when the data stage runs (`venus data collect`)."""

    env: Literal["miniwob"] = Field("miniwob", description="environment: MiniWoB++ pages in headless Chromium")
    tasks: list[str] = Field(..., min_length=1, description="task names, each with an oracle (`venus data collect --list`)")
    n: int = Field(100, ge=1, description="episodes attempted per task (page seeds seed..seed+n-1); failed ones are counted, not kept")
    seed: int = Field(0, ge=0, description="first page seed (training window: seeds below 100000)")
    workers: int = Field(4, ge=1, description="browser contexts playing episodes side by side (the output does not depend on it)")

    @model_validator(mode="after")
    def _training_seeds(self) -> CollectSourceSpec:
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"collect.tasks {self.tasks} lists a task twice")
        if self.seed + self.n > TRAINING_SEED_END:
            raise ValueError(f"collect: page seeds {self.seed}..{self.seed + self.n - 1} reach {TRAINING_SEED_END}, "
                             f"where online evaluation pages start; training seeds stay below it")
        return self


class DataSourceSpec(Section):
    name: str = Field(..., min_length=1, description="source name, used in provenance and reports")
    kind: Literal["synth", "dataset", "collect"] = Field(
        "dataset", description="synth = generated by the synthetic GUI world; dataset = read from uri; "
                               "collect = oracle episodes played in a live environment by the data stage"
    )
    uri: str | None = Field(None, description="dataset location (directory or file:// / s3:// URI) for kind=dataset")
    format: str = Field(
        "venus",
        description="on-disk format of uri: 'venus' (the project's dataset layout) or a registered importer name",
    )
    synth: SynthSourceSpec | None = Field(None, description="generator settings for kind=synth")
    collect: CollectSourceSpec | None = Field(None, description="what to play for kind=collect")
    weight: float = Field(1.0, gt=0, description="relative weight of this source inside its domain")

    @model_validator(mode="after")
    def _consistent(self) -> DataSourceSpec:
        if self.kind != "collect" and self.collect is not None:
            raise ValueError(f"source {self.name!r}: collect settings only apply to kind=collect")
        if self.kind == "synth":
            if self.synth is None:
                self.synth = SynthSourceSpec()
            if self.uri is not None:
                raise ValueError(f"source {self.name!r}: kind=synth takes no uri")
        elif self.kind == "collect":
            if self.collect is None:
                raise ValueError(f"source {self.name!r}: kind=collect needs collect settings (env, tasks, n, seed)")
            if self.uri is not None or self.synth is not None:
                raise ValueError(f"source {self.name!r}: kind=collect takes no uri and no synth settings")
        else:
            if not self.uri:
                raise ValueError(f"source {self.name!r}: kind=dataset needs a uri")
            if self.synth is not None:
                raise ValueError(f"source {self.name!r}: synth settings only apply to kind=synth")
            if self.format != "venus" and self.format not in registry("importers"):
                known = ", ".join(sorted({"venus", *registry("importers").names()}))
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
    api_key_secret: str | None = Field(
        None,
        min_length=1,
        description="Kubernetes Secret whose key VENUS_JUDGE_API_KEY the score_data pod gets as env for the "
        "openai judge (the key itself is never in the spec); None: no key is sent",
    )
    keep_threshold: int = Field(7, ge=0, le=10, description="score >= this is kept (UI-Venus-1.5: 7)")
    rewrite_threshold: int = Field(4, ge=0, le=10, description="score in [this, keep) is rewritten (UI-Venus-1.5: 4)")
    on_low_score: Literal["rebuild", "discard"] = Field(
        "rebuild",
        description="below rewrite_threshold: rebuild when the source allows (synthetic records are "
        "regenerated; navigation steps re-derived by an MLLM judge), else discard",
    )
    concurrency: int = Field(8, ge=1, description="judge requests in flight")
    timeout_s: float = Field(60.0, gt=0, description="per-request timeout of the judge")
    max_retries: int = Field(3, ge=0, description="retries with backoff on timeouts, 5xx and rate limits")
    cache: bool = Field(True, description="cache judgements by (sample hash, judge id, prompt version)")
    prompt_version: str = Field(
        "v2", description="judge prompt version (part of the cache key; v2: episodes name their first wrong step)"
    )

    @model_validator(mode="after")
    def _thresholds(self) -> ScoringSpec:
        if self.rewrite_threshold > self.keep_threshold:
            raise ValueError(
                f"rewrite_threshold ({self.rewrite_threshold}) > keep_threshold ({self.keep_threshold})"
            )
        return self


# --------------------------------------------------------------------------- merge / eval


class MergePartSpec(Section):
    density: float | None = Field(None, gt=0, le=1, description="TIES density for this part (null = merge.density)")
    lambda_: float | None = Field(None, alias="lambda", gt=0, description="scale for this part (null = merge.lambda)")
    copy_base: bool = Field(False, description="take this part from the base unchanged")


class DistillPromptsSpec(Section):
    """Where the distillation prompts come from: the synthetic world (grounding records of one level,
    navigation episodes of one level on mobile and on web, each from its own seed) or a dataset."""

    source: Literal["synth", "dataset"] = Field(
        "synth", description="synth = generated by the synthetic GUI world from `seed`; dataset = read from `data`"
    )
    data: str | None = Field(
        None, description="source=dataset: a Venus dataset directory (grounding records; mobile / web trajectories or steps)"
    )
    seed: int = Field(
        5000,
        ge=0,
        description="source=synth: grounding from this seed, mobile navigation from seed+1, web from seed+2; must lie "
        "outside eval.held_out_suites.seed_range and differ from every data.sources[].synth.seed (ours: 5000, "
        "which no other stage uses)",
    )
    grounding_level: int = Field(1, ge=0, le=6, description="source=synth: curriculum level of the grounding prompts")
    navigation_level: int = Field(3, ge=0, le=6, description="source=synth: curriculum level of the navigation episodes")
    records: int = Field(
        64, ge=1, description="source=synth: grounding records, and navigation episodes per platform, to generate"
    )

    SEED_OFFSETS: ClassVar[dict[str, int]] = {"grounding": 0, "mobile": 1, "web": 2}

    def domain_seed(self, domain: str) -> int:
        """The synthesis seed of `domain`'s prompts."""
        return self.seed + self.SEED_OFFSETS[domain]

    @model_validator(mode="after")
    def _source(self) -> DistillPromptsSpec:
        if self.source == "dataset" and not self.data:
            raise ValueError("merge.distill.prompts: source=dataset needs data (a dataset directory)")
        if self.source == "synth" and self.data is not None:
            raise ValueError("merge.distill.prompts: source=synth takes no data (set source: dataset to read it)")
        return self


class DistillSpec(Section):
    """Multi-teacher on-policy distillation (`merge.method: distill`, `venus_core.merge.distill`): the
    student samples answers to each domain's prompts and is trained towards that domain's specialist
    by the per-token reverse KL over the vocabulary."""

    init: Literal["ties", "base"] = Field(
        "ties", description="student start: a TIES merge of the specialists (merge.* settings) or the base checkpoint"
    )
    steps: int = Field(50, ge=1, le=100000, description="optimizer steps (each one batch of every domain)")
    batch_size: int = Field(4, ge=1, le=1024, description="prompts per domain per step (one sampled answer each)")
    lr: float = Field(1e-5, gt=0, le=1e-2, description="AdamW learning rate (constant; ours)")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping norm")
    max_new_tokens: int = Field(64, ge=1, le=4096, description="answer length limit of the student's samples")
    temperature: float = Field(1.0, gt=0, le=10, description="sampling temperature of the student's answers")
    seed: int = Field(0, description="seed of prompt order and sampling")
    prompts: DistillPromptsSpec = Field(default_factory=DistillPromptsSpec, description="where the prompts come from")


class MergeSpec(Section):
    method: MergeMethodName = Field("ties", description="merge method of the published checkpoint")
    weights: dict[str, float] = Field(
        default_factory=lambda: {"grounding": 1.0, "mobile": 1.0, "web": 1.0},
        description="weight per specialist (keys: grounding, mobile, web)",
    )
    density: float = Field(0.2, gt=0, le=1, description="TIES: share of task-vector entries kept")
    lambda_: float = Field(1.0, alias="lambda", gt=0, description="scale of the merged task vector")
    sign_election: Literal["mass", "weighted_mass", "count"] = Field("mass", description="TIES sign election")
    zero_sign: Literal["none", "positive"] = Field(
        "none", description="TIES: entries whose elected mass is 0 get no update (none) or + (mergekit)"
    )
    trim_scope: Literal["tensor", "model"] = Field("tensor", description="TIES trim threshold per tensor or across the whole model")
    parts: dict[Literal["vision", "projector", "language", "embeddings"], MergePartSpec] = Field(
        default_factory=dict, description="per-part overrides (vision tower, projector, language model, embeddings + LM head)"
    )
    max_working_bytes: int = Field(1 << 30, ge=1 << 16, description="memory bound of the streaming merge")
    shard_bytes: int = Field(2 << 30, ge=1, description="output shard size in bytes")
    compare: list[str] = Field(
        default_factory=lambda: ["ties", "linear", "best_single"],
        description="candidates evaluated on the quick eval set before publishing (merge methods, distill, best_single)",
    )
    distill: DistillSpec = Field(default_factory=DistillSpec, description="settings of merge.method / compare 'distill'")

    @model_validator(mode="after")
    def _keys(self) -> MergeSpec:
        bad = sorted(set(self.weights) - set(RL_DOMAINS))
        if bad:
            raise ValueError(f"merge.weights: unknown specialist(s) {bad}; known: {list(RL_DOMAINS)}")
        methods = registry("merge_methods")
        for candidate in self.compare:
            if candidate != "best_single" and candidate not in methods and candidate not in TRAINED_MERGE_METHODS:
                known = ", ".join(["best_single", *methods.names(), *TRAINED_MERGE_METHODS])
                raise ValueError(f"merge.compare: unknown candidate {candidate!r}; known: {known}")
        return self


class EvalSuiteSpec(Section):
    name: str = Field(..., min_length=1, description="suite name in reports")
    evaluator: EvaluatorName = Field(..., description="registered evaluator")
    data: str | None = Field(None, description="dataset directory / URI (offline suites)")
    limit: int | None = Field(None, ge=1, description="evaluate at most this many samples / episodes")


class HeldOutSuitesSpec(Section):
    """The fixed held-out suites the evaluate stage scores every model on (`venus_core.eval.heldout`).

    Generated by the synthetic GUI world from seeds in `seed_range`, which no training data may
    use (checked when the spec loads): grounding level L from seed `first + L`, navigation on
    mobile / web from `first + 10` / `first + 11`. The same section gives the same suites, so
    they are cached under `cache_dir` by the section's digest and shared by every model and run.
    """

    enabled: bool = Field(True, description="score every model on these suites (besides eval.suites)")
    seed_range: tuple[int, int] = Field(
        (700000, 700999),
        description="generator seeds [first, last] reserved for the held-out suites; no data.sources[].synth.seed may lie in it",
    )
    grounding_levels: list[Annotated[int, Field(ge=0, le=6)]] = Field(
        default_factory=lambda: [0, 1, 2], min_length=1, description="curriculum levels of the grounding suite"
    )
    grounding_per_level: int = Field(100, ge=1, description="grounding samples per level (refusals included)")
    grounding_free_levels: list[Annotated[int, Field(ge=1, le=2)]] = Field(
        default_factory=list,
        description="levels (1, 2) scored again on boards off the grid (buttons of random size and place), as a "
                    "suite of its own (held-out-grounding-free, grounding_per_level each): a model that learned "
                    "the grid's places and not the match scores near the random-button level there")
    refusal_share: float = Field(
        0.2, ge=0, le=1, description="share of grounding samples naming an absent element (answer [-1,-1]); ours"
    )
    navigation_level: int = Field(3, ge=0, le=6, description="curriculum level of the navigation suite")
    navigation_steps: int = Field(
        200, ge=2, description="navigation steps at least: half mobile, half web, whole episodes"
    )
    cache_dir: str = Field("runs/eval-suites", description="local directory keeping generated suites by digest")

    NAVIGATION_SEED_OFFSET: ClassVar[int] = 10
    FREE_SEED_OFFSET: ClassVar[int] = 20
    PLATFORMS: ClassVar[tuple[str, str]] = ("mobile", "web")

    def grounding_seed(self, level: int) -> int:
        return self.seed_range[0] + level

    def grounding_free_seed(self, level: int) -> int:
        return self.seed_range[0] + self.FREE_SEED_OFFSET + level

    def navigation_seed(self, platform: str) -> int:
        return self.seed_range[0] + self.NAVIGATION_SEED_OFFSET + self.PLATFORMS.index(platform)

    @model_validator(mode="after")
    def _range(self) -> HeldOutSuitesSpec:
        first, last = self.seed_range
        need = self.NAVIGATION_SEED_OFFSET + len(self.PLATFORMS)
        if self.grounding_free_levels:
            need = self.FREE_SEED_OFFSET + max(self.grounding_free_levels) + 1
        if last - first + 1 < need:
            raise ValueError(f"seed_range [{first}, {last}] must hold at least {need} seeds "
                             f"(grounding levels at first+0..6, navigation at first+{self.NAVIGATION_SEED_OFFSET}.., "
                             f"boards off the grid at first+{self.FREE_SEED_OFFSET}+level)")
        if len(set(self.grounding_levels)) != len(self.grounding_levels):
            raise ValueError(f"grounding_levels {self.grounding_levels} lists a level twice")
        if len(set(self.grounding_free_levels)) != len(self.grounding_free_levels):
            raise ValueError(f"grounding_free_levels {self.grounding_free_levels} lists a level twice")
        return self


class EvalSpec(Section):
    suites: list[EvalSuiteSpec] = Field(default_factory=list, description="what the evaluate stage runs")
    held_out_suites: HeldOutSuitesSpec = Field(
        default_factory=HeldOutSuitesSpec, description="fixed held-out suites generated from reserved seeds"
    )
    batch_size: int = Field(16, ge=1, description="inference batch size")
    grounding_max_new_tokens: int = Field(32, ge=1, description="answer budget of grounding suites (a point is a few tokens)")
    navigation_max_new_tokens: int = Field(
        256, ge=1, description="answer budget of a navigation step, offline and online (think, action, conclusion)"
    )
    temperature: float = Field(0.0, ge=0, description="decoding temperature (UI-Venus: 0)")
    repetition_penalty: float = Field(1.05, gt=0, description="decoding repetition penalty (UI-Venus: 1.05)")
    held_out: int = Field(200, ge=1, description="held-out synthetic samples per domain for learning checks")
    baselines: list[Literal["base", "random_init"]] = Field(
        default_factory=lambda: ["base"],
        description="models the evaluate stage scores before the run's own, the ablation's first rows: base = "
                    "model.base as the stages load it (venus-tiny: the shipped bootstrap), random_init = "
                    "model.tiny at random initialisation (tiny and bootstrap bases only)")
    workers: int = Field(
        1, ge=1, le=64, description="processes that evaluate models side by side (local checkpoints only; each "
                                    "holds one model; on CPU at most one per core, on a GPU as many as fit its memory)")


# --------------------------------------------------------------------------- the spec

_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")


class AgentSpec(Section):
    """One GUI agent: its base model, data, the training stages and where it runs."""

    name: str = Field("venus-agent", description="agent name: lowercase letters, digits, '.', '_' and '-'")
    description: str = Field("", description="free text shown in the Kubeflow UI and MLflow")
    spec_version: Literal[1] = Field(1, description="version of this file's schema")
    model: ModelSpec = Field(default_factory=ModelSpec, description="base model")
    data: DataSpec = Field(default_factory=DataSpec, description="training data and mixture")
    flywheel: FlywheelSpec = Field(default_factory=FlywheelSpec, description="on-device trajectory generation")
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

    @model_validator(mode="after")
    def _baselines(self) -> AgentSpec:
        names = self.eval.baselines
        if len(set(names)) != len(names):
            raise ValueError(f"eval.baselines {names} names a model twice")
        if "random_init" in names and "base" in names and self.model.base == "tiny":
            raise ValueError("eval.baselines: model.base is tiny, so base is already the random initialisation; "
                             "list one of base and random_init")
        if "random_init" in names and self.model.base not in ("tiny", "bootstrap"):
            raise ValueError(f"eval.baselines: random_init is model.tiny at random initialisation, a baseline of the "
                             f"tiny model only; model.base is {self.model.base!r} (drop random_init, or keep base)")
        return self

    @model_validator(mode="after")
    def _held_out_seeds(self) -> AgentSpec:
        """No training data may come from the seeds reserved for the held-out evaluation suites."""
        held = self.eval.held_out_suites
        if not held.enabled:
            return self
        first, last = held.seed_range
        for i, source in enumerate(self.data.sources):
            if source.synth is not None and first <= source.synth.seed <= last:
                raise ValueError(f"data.sources[{i}].synth.seed ({source.name!r}): seed {source.synth.seed} lies in "
                                 f"eval.held_out_suites.seed_range [{first}, {last}], reserved for the held-out "
                                 "evaluation suites; pick a seed outside it")
        return self

    @model_validator(mode="after")
    def _distill_seeds(self) -> AgentSpec:
        """Synthetic distillation prompts use seeds of their own: not the held-out suites', nor a data source's."""
        prompts = self.merge.distill.prompts
        if prompts.source != "synth":
            return self
        held = self.eval.held_out_suites
        first, last = held.seed_range
        sources = {s.synth.seed: s.name for s in self.data.sources if s.synth is not None}
        for domain in prompts.SEED_OFFSETS:
            seed = prompts.domain_seed(domain)
            if held.enabled and first <= seed <= last:
                raise ValueError(f"merge.distill.prompts.seed: the {domain} prompts' seed {seed} lies in "
                                 f"eval.held_out_suites.seed_range [{first}, {last}], reserved for the held-out "
                                 "evaluation suites; pick a seed outside it")
            if seed in sources:
                raise ValueError(f"merge.distill.prompts.seed: the {domain} prompts' seed {seed} is data source "
                                 f"{sources[seed]!r}'s synth seed; distillation prompts need seeds of their own")
        return self

    @model_validator(mode="after")
    def _rl_sources(self) -> AgentSpec:
        known = [s.name for s in self.data.sources]
        for domain in ("grounding", "mobile", "web"):
            for name in getattr(self.offline_rl, domain).sources:
                if name not in known:
                    raise ValueError(f"offline_rl.{domain}.sources: {name!r} is not a data source (data.sources: {known}); "
                                     f"set offline_rl.{domain}.sources=[] to train on the mixture")
        return self

    @model_validator(mode="after")
    def _online_success_judge(self) -> AgentSpec:
        """`online_rl.success` judge / auto ask the data stage's MLLM judge (`scoring.judge`)."""
        if self.online_rl.success != "rules" and self.scoring.judge == "rules":
            raise ValueError(f"online_rl.success={self.online_rl.success} needs an MLLM judge, but scoring.judge is "
                             "'rules' (the data validators, which cannot see whether a goal was reached); set "
                             "scoring.judge=openai (with scoring.endpoint) or local, or online_rl.success=rules")
        return self

    @model_validator(mode="after")
    def _eval_workers(self) -> AgentSpec:
        """Each evaluation worker is a process with its own model: a CPU-only evaluate pod needs a core
        for each (more workers than cores only time-slice them)."""
        res = self.platform.resources.evaluate
        if res.gpu_count == 0 and self.eval.workers > 1:
            cores = cpu_cores(res.cpu)
            if self.eval.workers > cores:
                raise ValueError(f"eval.workers ({self.eval.workers}) exceeds the evaluate pod's CPU "
                                 f"(platform.resources.evaluate.cpu {res.cpu!r} = {cores:g} cores); "
                                 f"raise that cpu or lower eval.workers")
        return self


def cpu_cores(quantity: str) -> float:
    """A Kubernetes CPU quantity ("2", "1.5", "500m") in cores; a clear error for anything else."""
    text = str(quantity).strip()
    try:
        value = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        raise ValueError(f"CPU quantity {quantity!r}: expected cores (\"2\", \"1.5\") or millicores (\"500m\")") from None
    if not value > 0:
        raise ValueError(f"CPU quantity {quantity!r}: must be positive")
    return value
