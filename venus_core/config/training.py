"""Agent spec sections of the training stages: mid-training, offline GRPO, online RL.

Defaults follow the UI-Venus reports where they publish a number (KL 4e-3 / 1e-3, group size 8,
frozen vision tower for navigation, step limit 30); the reward weights and tolerances are ours.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from venus_core.config.base import EnvName, RewardName, Section

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
    timeout_s: float = Field(172_800.0, gt=0, description="launcher=trainjob: delete the TrainJob and fail after this long")


class InstructionHeadSpec(Section):
    """Auxiliary loss that makes the answer positions say what the instruction asked for
    (`venus_core.train.instruction_head`; measured in docs/learning.md). The head is trained with the
    model and thrown away: checkpoints never contain it."""

    weight: float = Field(0.0, ge=0, description="weight of the head's cross-entropy in the training loss; 0 = off")
    layer: int = Field(-2, description="hidden-states index the head reads (-2 = the input of the last decoder layer)")
    weighting: Literal["idf", "uniform"] = Field(
        "idf", description="target mass of each query token: idf over the stage's training queries (tokens every "
        "query shares get none), or uniform")
    max_vocab: int = Field(32_768, ge=2, description="the head's outputs: the most frequent query units of the stage's corpus")
    ngram: int = Field(2, ge=1, le=4, description="target units: the query's token n-grams of lengths 1..ngram (n-grams "
                       "spanning a word tell apart words whose sub-word pieces other words share; 2 learned level 1 "
                       "faster than 1, docs/learning.md)")


class AttentionSupervisionSpec(Section):
    """Auxiliary loss that makes the positions predicting a click's coordinates attend to the visual
    token under the click (`venus_core.train.attention_supervision`; measured in docs/learning.md).
    Needs eager attention while training."""

    weight: float = Field(0.0, ge=0, description="weight of -log(attention mass on the target's visual token) in the "
                          "training loss; 0 = off")
    layer: int = Field(-1, description="decoder layer whose attention is supervised (-1 = the last)")


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
    length_group_ratio: float = Field(
        2.0, ge=0, description="run each micro-batch as row groups whose longest row is at most this many times "
        "the shortest (same loss and gradient, far less padding); 0 = one padded batch. Not used with DeepSpeed")
    precision: Literal["auto", "fp32", "bf16"] = Field("auto", description="auto = bf16 on GPU, fp32 on CPU")
    freeze_vision: bool = Field(False, description="freeze the vision tower")
    save_every: int = Field(200, ge=1, description="checkpoint every N steps (atomic, resumable)")
    eval_every: int = Field(100, ge=1, description="held-out evaluation every N steps")
    seed: int = Field(0, description="training seed")
    wise_ft: float = Field(
        1.0, gt=0, le=1, description="publish start + wise_ft x (trained - start): WiSE-FT weight-space "
        "interpolation toward the weights training started from (model.base as loaded, saved by the job "
        "as CHECKPOINTS/start; Wortsman et al. 2022; a task-arithmetic merge on disk, "
        "venus_core.merge.wise_ft). The trained weights stay beside in trained/, the report holds both "
        "models' held-out rates; 1 = publish the trained weights as they are")
    instruction_head: InstructionHeadSpec = Field(
        default_factory=InstructionHeadSpec, description="auxiliary instruction head at the answer positions")
    attention_supervision: AttentionSupervisionSpec = Field(
        default_factory=AttentionSupervisionSpec,
        description="auxiliary loss on the attention of the positions predicting a click's coordinates")
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
    unparsed_type_credit: bool = Field(
        True, description="navigation: an action that names the reference's type but does not parse (e.g. a "
        "coordinate outside the frame) still earns R_type (no format, no argument credit); false = the reports' "
        "rule (0 for any unparseable action)")

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
    epoch_size: int = Field(
        0, ge=0, description="training steps per alignment epoch; 0 = all of them (UI-Venus-1.0). N > 0: each epoch "
        "is the next N steps of one seeded shuffle (wrapping), so that a run shorter than a pass over its data still "
        "aligns (after every N / prompts_per_step optimizer steps); the same epochs when `enabled` is false")


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
    save_every: int = Field(20, ge=1, description="checkpoint every N steps when the job has --checkpoints (exact resume)")
    sources: list[str] = Field(
        default_factory=list,
        description="data.sources (by name) this job trains on, as scored by score_data, minus the mixture's "
        "validation records; empty = the mid-training mixture's train split. RL data need not follow the "
        "mid-training ratios (the mixture keeps only as many records per domain as its scarcest domain allows)")


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


class RLDistributedSpec(Section):
    """Distributed launch of the offline GRPO jobs (`venus_core.rl.distributed`), as
    `mid_train.distributed` for mid-training: each rank samples and trains on its strided share of
    a step's groups; DDP or FSDP2 averages the gradients."""

    backend: Literal["auto", "single", "ddp", "fsdp2"] = Field(
        "auto", description="auto = single process, DDP under torchrun; fsdp2 shards weights, gradients and "
        "optimizer state (8B / 30B-A3B; why not DeepSpeed ZeRO-3: venus_core/rl/distributed.py)")
    nodes: int = Field(1, ge=1, description="nodes of the training job")
    procs_per_node: int = Field(1, ge=1, description="processes (GPUs) per node")
    gradient_checkpointing: Literal["auto", "on", "off"] = Field(
        "auto", description="trade compute for activation memory; auto = on when the policy is on a GPU")
    launcher: Literal["in_pod", "trainjob"] = Field(
        "in_pod", description="cluster: torchrun inside the component pod, or a Kubeflow Trainer TrainJob")
    timeout_s: float = Field(172_800.0, gt=0, description="launcher=trainjob: delete the TrainJob and fail after this long")


class OfflineRLSpec(Section):
    grounding: GroundingRLSpec = Field(default_factory=GroundingRLSpec, description="grounding GRPO job")
    mobile: MobileRLSpec = Field(default_factory=MobileRLSpec, description="mobile navigation GRPO job")
    web: WebRLSpec = Field(default_factory=WebRLSpec, description="web navigation GRPO job")
    distributed: RLDistributedSpec = Field(default_factory=RLDistributedSpec,
                                           description="distributed launch of the three jobs")


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
    dedupe_scope: Literal["start", "goal"] = Field(
        "start", description="start: goals are compared only between tasks with the same start state "
        "(the same goal on another board or app content is another task); goal: every goal with every goal")
    held_out: int = Field(16, ge=0, description="held-out tasks (sim-phone seeds from 900000), never sampled for training")
    held_out_levels: list[Annotated[int, Field(ge=0, le=6)]] = Field(
        default_factory=lambda: [3, 4, 5], description="curriculum levels (0-6) of the held-out tasks, round robin")
    ema_alpha: float = Field(0.2, gt=0, le=1, description="weight of a new rollout group in a bucket's success-rate EMA")
    promote_at: float = Field(0.7, gt=0, le=1, description="a bucket whose success EMA reaches this gives share to the next harder bucket")
    promote_step: float = Field(0.05, ge=0, le=1, description="share moved per recorded group while a bucket is at or above promote_at")
    min_share: float = Field(0.1, ge=0, le=1, description="a bucket never gives share below this floor")
    min_groups: int = Field(8, ge=1, description="groups a bucket must have recorded before it can give share")
    fail_limit: int = Field(3, ge=1, description="consecutive all-fail groups that set a task aside")
    retry_after: int = Field(20, ge=1, description="sample() calls a set-aside task sits out before it is retried")

    @model_validator(mode="after")
    def _shares(self) -> TaskPoolSpec:
        total = self.easy + self.medium + self.hard
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"easy + medium + hard must sum to 1, got {total:.6f}")
        if self.held_out and not self.held_out_levels:
            raise ValueError("held_out > 0 needs at least one of held_out_levels")
        return self


class OnlineRLSpec(Section):
    enabled: bool = Field(False, description="run full-trajectory GRPO on live environments")
    envs: list[EnvName] = Field(default_factory=list, description="registered environment backends")
    task_pool: TaskPoolSpec = Field(default_factory=TaskPoolSpec, description="online task pool")
    max_steps_per_episode: int = Field(30, ge=1, description="step limit per episode (UI-Venus: about 30)")
    group_size: int = Field(8, ge=2, description="trajectories per task")
    steps: int = Field(100, ge=1, description="optimizer steps")
    lr: float = Field(1e-5, gt=0, description="learning rate")
    tasks_per_step: int = Field(4, ge=1, description="tasks (rollout groups) per optimizer step")
    devices: int = Field(4, ge=1, description="environments (leased devices) that roll out in parallel")
    levels: list[Annotated[int, Field(ge=0, le=6)]] = Field(
        default_factory=lambda: [3, 4], description="synthetic-world curriculum levels of the sim-phone training tasks")
    train_tasks: int = Field(64, ge=1, description="static training tasks synthesised per env before deduplication")
    web_tasks: list[str] = Field(default_factory=lambda: ["click-button", "click-link", "click-dialog"],
                                 description="MiniWoB++ task names of the web pool")
    device_service: Literal["local", "gateway"] = Field(
        "gateway", description="envs in process (local: sim phones, browser contexts) or leased through the "
        "device gateway (sim phones over ADB, browsers over CDP)")
    web_device_service: Literal["local", "gateway"] | None = Field(
        None, description="the web domain's browsers, when they should differ from device_service (null: "
        "device_service)")
    temperature: float = Field(1.0, gt=0, description="rollout sampling temperature (log-probs use the same)")
    max_new_tokens: int = Field(96, ge=1, description="completion length limit per step")
    clip_eps: float = Field(0.2, gt=0, description="PPO clip range of the token ratio")
    freeze_vision: bool = Field(True, description="freeze the vision tower (as offline navigation RL)")
    history_len: int = Field(5, ge=0, description="previous (think, action) steps in the prompt (UI-Venus: 5)")
    call_timeout_s: float = Field(30.0, gt=0, description="limit of every env call (reset, step, success check)")
    micro_batch: int = Field(8, ge=1, description="step rows per forward/backward pass of the learner")
    staleness: int = Field(0, ge=0, description="rollout batches collected ahead of the learner (0: synchronous)")
    rollout_server: str | None = Field(None, description="OpenAI-compatible generation server of the rollouts, its "
                                       "/v1 root (vLLM; venus serve); '{domain}' is replaced by mobile / web, so "
                                       "each specialist has its own server; None: sample in process")
    rollout_server_kind: Literal["venus", "vllm"] = Field(
        "venus", description="how the rollout server loads the learner's weights: venus (venus serve "
        "--allow-load-weights, POST /v1/load_weights) or vllm (vLLM with VLLM_SERVER_DEV_MODE=1 and "
        "--worker-extension-cls venus_core.rl.online.vllm_worker.VenusWorkerExtension: POST /collective_rpc, "
        "then /reset_prefix_cache)")
    rollout_model: str = Field("policy", description="model name the rollout server serves")
    save_every: int = Field(5, ge=1, description="steps between checkpoints (with --checkpoints)")
    seed: int = Field(0, description="seed of sampling, task order and rollouts")
    reward: OnlineRewardSpec = Field(default_factory=OnlineRewardSpec, description="trajectory reward")
    kl: AdaptiveKLSpec = Field(default_factory=AdaptiveKLSpec, description="adaptive KL")
    entropy: EntropyScheduleSpec = Field(default_factory=EntropyScheduleSpec, description="annealed entropy bonus")
    success: Literal["rules", "auto", "judge"] = Field(
        "rules", description="who decides a training episode's success: rules (the env's state check), auto (the "
                             "rule where the env has one, else the MLLM judge scoring.judge), judge (the judge; the "
                             "rule is still read and the agreement reported); held-out checks stay on rules")

    def service_of(self, domain: str) -> str:
        """Where `domain`'s devices come from: `web_device_service` for web when set, else `device_service`."""
        return (self.web_device_service or self.device_service) if domain == "web" else self.device_service

    @model_validator(mode="after")
    def _envs_when_enabled(self) -> OnlineRLSpec:
        if self.enabled and not self.envs:
            raise ValueError("online_rl.enabled needs at least one env")
        return self
