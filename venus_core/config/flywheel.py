"""The `flywheel` section of the agent spec: rounds of on-device trajectory generation.

Why its own section: the data flywheel (`venus_core.flywheel`, `venus data generate`, pipeline job
`generate_data`) is a data-stage option, not part of online RL, but it runs on online RL's machinery,
so it reads the shared settings from there instead of repeating them: the device service, the env
call timeout and the prompt history (`online_rl.device_service`, `call_timeout_s`, `history_len`)
and the task pool's uniqueness rule (`online_rl.task_pool.dedupe_similarity` / `dedupe_scope`).
`env: miniwob` runs the flywheel on MiniWoB++ pages in headless Chromium (online RL's web envs);
`levels` then does not apply and `web_tasks` / `web_candidates_per_round` do.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from venus_core.config.base import Section, _registered

ExpanderName = Annotated[str, _registered("expanders")]


class FlywheelSpec(Section):
    enabled: bool = Field(False, description="run generate_data before score_data; its dataset becomes the "
                          "score_data source `flywheel`")
    env: Literal["sim-phone", "miniwob"] = Field(
        "sim-phone", description="environment the tasks run on: sim-phone (simulated phones) or miniwob "
        "(MiniWoB++ pages in headless Chromium)")
    levels: list[Annotated[int, Field(ge=0, le=6)]] = Field(
        default_factory=lambda: [0, 1], min_length=1,
        description="sim-phone: synthetic-world curriculum levels of the seeds (one screen size: 0-2, 3-4, 5 or 6)")
    seeds_file: str | None = Field(None, description="seed task prompts (JSONL or YAML list of {env, app, level, "
                                   "prompt, examples}); None: one seed per (level, app) from the task pool's static "
                                   "templates (miniwob: one per task)")
    web_tasks: list[str] = Field(default_factory=list, description="env=miniwob: MiniWoB++ tasks, one seed each; "
                                 "empty: every task that has a DOM oracle (ignored with seeds_file)")
    rounds: int = Field(3, ge=1, description="expansion -> execution -> verification -> feedback rounds")
    tasks_per_round: int = Field(32, ge=1, description="tasks the expander proposes per round")
    candidates_per_round: int = Field(
        512, ge=1, description="sim-phone: start states (synthetic seeds) drawn per level and round, from which "
        "proposals are instantiated")
    web_candidates_per_round: int = Field(
        48, ge=1, description="env=miniwob: pages (page seeds) generated per task and round, one page load each, "
        "from which proposals are chosen")
    first_seed: int = Field(20000, ge=0, description="first synthetic seed of the candidate windows (round r "
                            "draws seeds first_seed + r * candidates_per_round onward; training seeds 0-99999 only)")
    expander: ExpanderName = Field("rules", description="rules (instantiates task parameters, biased toward "
                                   "verified ones) or openai (an OpenAI-compatible model writes the tasks)")
    expander_endpoint: str | None = Field(None, description="OpenAI-compatible /v1 root of the openai expander "
                                          "(vLLM in a cluster, venus serve or a scripted server on a laptop)")
    expander_model: str | None = Field(None, description="model name sent to the expander endpoint")
    expander_examples: int = Field(8, ge=0, description="verified tasks shown as in-context examples per request")
    explore: float = Field(0.25, ge=0, le=1, description="rules expander: share of proposals drawn uniformly, "
                           "not by similarity to verified tasks")
    policy: Literal["model", "oracle"] = Field(
        "model", description="who executes: the model (the stage's checkpoint, or policy_server) or the "
        "environment's scripted oracle (the synthetic world's planner; MiniWoB++'s DOM oracles)")
    policy_server: str | None = Field(None, description="OpenAI-compatible /v1 root serving the policy (vLLM); "
                                      "None: the checkpoint in process")
    policy_model: str = Field("policy", description="model name the policy server serves")
    temperature: float = Field(0.0, ge=0, description="policy decoding temperature (0: greedy, as the evaluator)")
    max_new_tokens: int = Field(128, ge=1, description="answer budget per step")
    max_steps_per_episode: int = Field(3, ge=1, description="step limit per episode")
    devices: int = Field(4, ge=1, description="devices leased in parallel for execution (miniwob: browser contexts "
                         "in process)")
    verifier: Literal["auto", "rules", "judge"] = Field(
        "auto", description="auto: rules on env state where the env exposes it, else the MLLM judge; "
        "judge: the MLLM judge decides (rules still compared)")
    judge: bool = Field(False, description="also judge every executed trajectory with scoring.judge (an MLLM "
                        "backend) and report its agreement with the rules")
    seed: int = Field(0, description="seed of expansion and sampling")

    @model_validator(mode="after")
    def _consistent(self) -> FlywheelSpec:
        if self.expander == "openai" and not (self.expander_endpoint and self.expander_model):
            raise ValueError("flywheel.expander=openai needs flywheel.expander_endpoint and flywheel.expander_model")
        per, name = ((self.web_candidates_per_round, "web_candidates_per_round") if self.env == "miniwob"
                     else (self.candidates_per_round, "candidates_per_round"))
        last = self.first_seed + self.rounds * per
        if last > 100000:
            raise ValueError(f"flywheel: first_seed + rounds * {name} = {last} passes the training "
                             "seeds (0-99999); the seeds above are evaluation / held-out seeds")
        if len(set(self.web_tasks)) != len(self.web_tasks):
            raise ValueError(f"flywheel.web_tasks {self.web_tasks} lists a task twice")
        return self
