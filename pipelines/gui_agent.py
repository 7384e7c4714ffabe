"""The GUI-agent pipeline: [generate_data] -> score_data -> mid_train -> offline_rl x3 -> [online_rl] -> merge -> evaluate.

`build_pipeline(spec)` turns one agent spec into a KFP pipeline function; the same function is
compiled to IR YAML for a cluster (`venus compile`) or run by `kfp.local` on a laptop (`venus run`).

How the spec reaches the jobs: the resolved spec (YAML, overrides already applied) is the pipeline
parameter `agent_spec`, and every component writes it to a file for `--spec`. The values a user
typically changes from the Kubeflow UI are typed pipeline parameters whose defaults come from the
spec (learning rates, steps, KL, merge method and density, evaluation limit); components pass them
to their job as `--set` overrides, followed by the free-form `overrides` list (so an explicit
`--set` from the UI wins). Credentials are never parameters (see pipelines/k8s.py).

The three offline GRPO specialists are three tasks, not a `dsl.ParallelFor`: each needs its own
parameters, display name and output wired by name into merge (Collected outputs lose the domain),
and independent tasks run in parallel on a cluster all the same. A domain whose
`offline_rl.<domain>.enabled` is false gets no task and is left out of the merge.

The data flywheel: with `flywheel.enabled`, a `generate_data` task (`components/generate_data.py`)
runs first and its dataset goes to score_data as the optional input `generated` (scored as the
source `flywheel` beside the spec's sources). Off in both shipped specs.

Online RL: with `online_rl.enabled`, each navigation specialist (mobile, web) goes through an
`online_rl` task (`components/online_rl.py`: `(agent_spec, overrides, domain, base: Input[Model],
model: Output[Model], metrics: Output[Metrics])`) before the merge. The two run at the same time,
so a spec with `online_rl.rollout_server` must name one server per domain (`{domain}` in the URL):
each task loads its own weights into its server.
"""

# No `from __future__ import annotations`: kfp reads the pipeline function's real annotation objects.
import json
from collections.abc import Callable
from typing import Any, List

from kfp import dsl

import components
from pipelines.k8s import apply_platform, pipeline_root
from venus_core.config import AgentSpec, spec_to_dict
from venus_core.config.spec import RL_DOMAINS
from venus_core.config.stages import stage_display_name

ONLINE_RL_DOMAINS = ("mobile", "web")
TRAIN_IMAGE_STAGES = ("mid_train", "offline_rl", "online_rl")


class PipelineError(ValueError):
    """The spec asks for a pipeline this version cannot build; the message names the field."""


def stage_image(spec: AgentSpec, stage: str) -> str:
    """Training stages, and any stage given GPUs, run on the CUDA train image; the rest on base."""
    images = spec.platform.images
    gpus = getattr(spec.platform.resources, stage).gpu_count
    return images.train if stage in TRAIN_IMAGE_STAGES or gpus > 0 else images.base


def spec_text(spec: AgentSpec) -> str:
    """The resolved spec as one line of JSON (which YAML, and so `--spec`, reads).

    One line because kfp copies parameter defaults into the comment header of the IR file, and a
    multi-line default would end that comment early and break the YAML.
    """
    return json.dumps(spec_to_dict(spec), ensure_ascii=True, separators=(",", ":"))


def online_rl_domains(spec: AgentSpec) -> list[str]:
    """The navigation specialists that go through online_rl: none unless `online_rl.enabled`."""
    if not spec.online_rl.enabled:
        return []
    return [d for d in ONLINE_RL_DOMAINS if getattr(spec.offline_rl, d).enabled]


def pipeline_stages(spec: AgentSpec) -> list[str]:
    """The stages `build_pipeline(spec)` runs, in order (online_rl only when a domain goes through it)."""
    online = ["online_rl"] if online_rl_domains(spec) else []
    generate = ["generate_data"] if spec.flywheel.enabled else []
    return [*generate, "score_data", "mid_train", "offline_rl", *online, "merge", "evaluate"]


def pipeline_description(spec: AgentSpec) -> str:
    """The pipeline's description: the spec's, then one line per stage with its component's summary.

    The stage lines are there because the IR has no field for a component's description (kfp
    keeps a component docstring's Args / Returns as input / output descriptions, and drops its
    summary); the pipeline description is the one the Kubeflow UI shows.
    """
    lines = [f"- {stage}: {components.summary(stage)}" for stage in pipeline_stages(spec)]
    return "\n".join([spec.description or f"Venus GUI agent {spec.name}", "", "Stages:", *lines])


class _Stages:
    """Components on their images, and the per-task settings every task gets."""

    def __init__(self, spec: AgentSpec) -> None:
        self.spec = spec
        self._cache: dict[str, Any] = {}

    def __call__(self, stage: str, domain: str | None = None, **kwargs: Any) -> Any:
        """A task of `stage`, shown as `stage_display_name(stage, domain)`; `domain` is also passed
        to the component when given."""
        if stage not in self._cache:
            if stage not in components.FUNCTIONS:
                raise PipelineError(f"stage {stage!r} has no component (known: {', '.join(components.FUNCTIONS)})")
            self._cache[stage] = components.component(stage, stage_image(self.spec, stage))
        task = self._cache[stage](**kwargs, **({"domain": domain} if domain else {}))
        task.set_display_name(stage_display_name(stage, domain))
        task.set_caching_options(True)
        apply_platform(task, stage, self.spec, domain)
        return task


def _online_rl(spec: AgentSpec, run: _Stages, specialists: dict[str, Any], agent_spec: Any,
               overrides: Any) -> dict[str, Any]:
    """The online RL slot: navigation specialists -> online_rl -> merge. Identity when disabled."""
    domains = online_rl_domains(spec)
    if not domains:
        return specialists
    server = spec.online_rl.rollout_server
    if server and len(domains) > 1 and "{domain}" not in server:
        raise PipelineError(f"online_rl.rollout_server {server!r} is one server for the {' and '.join(domains)} "
                            "online_rl tasks, which run at the same time and would load their weights into it "
                            "in turn; name one server per domain with '{domain}' (e.g. http://vllm-rollout-{domain}"
                            ".venus.svc:8000/v1)")
    out = dict(specialists)
    for domain in domains:
        out[domain] = run("online_rl", domain, agent_spec=agent_spec, overrides=overrides,
                          base=specialists[domain].outputs["model"])
    return out


def build_pipeline(spec: AgentSpec) -> Callable[..., Any]:
    """The KFP pipeline function of `spec` (decorated with `dsl.pipeline`), ready to compile or run."""
    if not spec.mid_train.enabled:
        raise PipelineError("mid_train.enabled is false: the pipeline starts the specialists from the "
                            "mid-trained checkpoint, so mid_train is required")
    domains = [d for d in RL_DOMAINS if getattr(spec.offline_rl, d).enabled]
    if not domains:
        raise PipelineError("offline_rl: every domain is disabled; enable at least one of "
                            f"{', '.join(RL_DOMAINS)}")
    rl = spec.offline_rl

    @dsl.pipeline(name=spec.name, description=pipeline_description(spec), pipeline_root=pipeline_root(spec))
    def gui_agent(
        agent_spec: str = spec_text(spec),
        overrides: List[str] = [],  # noqa: B006 - a KFP parameter default, never mutated
        mid_train_lr: float = spec.mid_train.lr,
        mid_train_max_steps: int = spec.mid_train.max_steps,
        grounding_lr: float = rl.grounding.lr,
        grounding_max_steps: int = rl.grounding.max_steps,
        grounding_kl_coef: float = rl.grounding.kl_coef,
        mobile_lr: float = rl.mobile.lr,
        mobile_max_steps: int = rl.mobile.max_steps,
        mobile_kl_coef: float = rl.mobile.kl_coef,
        web_lr: float = rl.web.lr,
        web_max_steps: int = rl.web.max_steps,
        web_kl_coef: float = rl.web.kl_coef,
        merge_method: str = spec.merge.method,
        merge_density: float = spec.merge.density,
        eval_limit: int = 0,
    ) -> None:
        """The GUI-agent pipeline of one agent spec.

        Args:
            agent_spec: The resolved agent spec as one line of JSON; every stage reads its section.
            overrides: Spec overrides as key=value (e.g. online_rl.steps=8), applied last by every stage.
            mid_train_lr: Mid-training peak learning rate (mid_train.lr).
            mid_train_max_steps: Mid-training optimizer steps (mid_train.max_steps).
            grounding_lr: Grounding specialist offline GRPO learning rate (offline_rl.grounding.lr).
            grounding_max_steps: Grounding specialist GRPO steps (offline_rl.grounding.max_steps).
            grounding_kl_coef: Grounding specialist KL penalty to the mid-trained model (offline_rl.grounding.kl_coef).
            mobile_lr: Mobile specialist offline GRPO learning rate (offline_rl.mobile.lr).
            mobile_max_steps: Mobile specialist GRPO steps (offline_rl.mobile.max_steps).
            mobile_kl_coef: Mobile specialist KL penalty to the mid-trained model (offline_rl.mobile.kl_coef).
            web_lr: Web specialist offline GRPO learning rate (offline_rl.web.lr).
            web_max_steps: Web specialist GRPO steps (offline_rl.web.max_steps).
            web_kl_coef: Web specialist KL penalty to the mid-trained model (offline_rl.web.kl_coef).
            merge_method: How the specialists are merged (merge.method): ties, linear or task_arithmetic.
            merge_density: Share of each task vector TIES keeps, by magnitude (merge.density).
            eval_limit: Samples or episodes per evaluation suite; 0 means every one.
        """
        run = _Stages(spec)
        common = {"agent_spec": agent_spec, "overrides": overrides}
        generated = ({"generated": run("generate_data", **common).outputs["data"]} if spec.flywheel.enabled else {})
        data = run("score_data", **common, **generated)
        mid = run("mid_train", **common, data=data.outputs["data"], lr=mid_train_lr,
                  max_steps=mid_train_max_steps)
        tuning = {
            "grounding": (grounding_lr, grounding_max_steps, grounding_kl_coef),
            "mobile": (mobile_lr, mobile_max_steps, mobile_kl_coef),
            "web": (web_lr, web_max_steps, web_kl_coef),
        }
        specialists: dict[str, Any] = {}
        for domain in domains:
            lr, steps, kl = tuning[domain]
            specialists[domain] = run("offline_rl", domain, **common,
                                      base=mid.outputs["model"], data=data.outputs["data"], lr=lr,
                                      max_steps=steps, kl_coef=kl)
        offline = {f"{d}_offline": specialists[d].outputs["model"] for d in online_rl_domains(spec)}
        specialists = _online_rl(spec, run, specialists, agent_spec, overrides)
        models = {d: t.outputs["model"] for d, t in specialists.items()}
        merged = run("merge", **common, base=mid.outputs["model"], method=merge_method,
                     density=merge_density, **models)
        use_spec_suites = spec.eval.held_out_suites.enabled or any(s.data for s in spec.eval.suites)
        run("evaluate", **common, mid=mid.outputs["model"], merged=merged.outputs["model"],
            use_spec_suites=use_spec_suites, limit=eval_limit,
            **({} if use_spec_suites else {"data": data.outputs["data"]}), **models, **offline)

    return gui_agent
