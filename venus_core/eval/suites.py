"""The registered evaluators (`EVAL_SUITES`) and the glue that turns model references into predictors.

Why registered: an agent spec names its evaluation suites (`eval.suites[].evaluator`), and the
evaluate job, the CLI and future evaluators (online) must agree on one calling convention:
`evaluator(predictor, data, *, suite, limit, max_new_tokens=None) -> EvalResult` (None: the
evaluator's own answer budget; the evaluate job passes the spec's `eval.*_max_new_tokens`). This module is a plugin (entry point
`venus_core.plugins`); it imports no torch at import time, so loading plugins stays cheap.

Registered: `grounding` (ScreenSpot-style), `nav_offline` (offline navigation, goal only:
AndroidControl *high* level, GUI-Odyssey), `nav_offline_low` (AndroidControl *low* level: goal
plus the step instruction) and `online_sim` (online tasks on the simulated phone; its `data` is an
online target string such as `sim-phone:levels=1-3,episodes=20`, `limit` caps the episodes). The spec's suite section has no options field, so the two
AndroidControl levels are two evaluator names rather than an option.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from venus_core.config.registry import EVAL_SUITES
from venus_core.eval.grounding import GROUNDING_MAX_NEW_TOKENS, evaluate_grounding
from venus_core.eval.navigation import NAV_MAX_NEW_TOKENS, evaluate_nav_offline
from venus_core.eval.predictors import DEFAULT_REPETITION_PENALTY, DEFAULT_TEMPERATURE, LocalPredictor, OpenAIPredictor, Predictor
from venus_core.eval.results import EvalResult


class Evaluator(Protocol):
    def __call__(self, predictor: Predictor, data: str | Path, *, suite: str, limit: int | None,
                 max_new_tokens: int | None = None) -> EvalResult: ...


def _budget(max_new_tokens: int | None, default: int) -> int:
    return default if max_new_tokens is None else max_new_tokens


@EVAL_SUITES.register("grounding", description="point-in-box grounding accuracy (ScreenSpot-v2 / Pro, synthetic)")
def grounding(predictor: Predictor, data: str | Path, *, suite: str, limit: int | None,
              max_new_tokens: int | None = None) -> EvalResult:
    return evaluate_grounding(data, predictor, limit=limit, suite=suite,
                              max_new_tokens=_budget(max_new_tokens, GROUNDING_MAX_NEW_TOKENS))


@EVAL_SUITES.register("nav_offline", description="offline navigation, goal only (AndroidControl high, GUI-Odyssey)")
def nav_offline(predictor: Predictor, data: str | Path, *, suite: str, limit: int | None,
                max_new_tokens: int | None = None) -> EvalResult:
    return evaluate_nav_offline(data, predictor, level="high", limit=limit, suite=suite,
                                max_new_tokens=_budget(max_new_tokens, NAV_MAX_NEW_TOKENS))


@EVAL_SUITES.register("nav_offline_low", description="offline navigation with step instructions (AndroidControl low)")
def nav_offline_low(predictor: Predictor, data: str | Path, *, suite: str, limit: int | None,
                    max_new_tokens: int | None = None) -> EvalResult:
    return evaluate_nav_offline(data, predictor, level="low", limit=limit, suite=suite,
                                max_new_tokens=_budget(max_new_tokens, NAV_MAX_NEW_TOKENS))


@EVAL_SUITES.register("online_sim", description="online task success on the simulated phone (sim-phone env)")
def online_sim(predictor: Predictor, data: str | Path | None, *, suite: str, limit: int | None,
               max_new_tokens: int | None = None) -> EvalResult:
    from venus_core.eval.online import ONLINE_MAX_NEW_TOKENS, evaluate_online
    from venus_core.eval.online_sim import fits, parse_target, target_envs, target_tasks, with_limit

    target = with_limit(parse_target(str(data) if data else None), limit)
    with target_envs(target) as envs:  # the next model's evaluation of this target reuses them
        return evaluate_online(envs, target_tasks(target), predictor, suite=suite, target=str(target), fits=fits,
                               max_new_tokens=_budget(max_new_tokens, ONLINE_MAX_NEW_TOKENS))


NO_DATA_EVALUATORS = frozenset({"online_sim"})
"""Evaluators that run without a dataset directory (their `data` is optional)."""


def answer_budget(evaluator: str, eval_spec: Any) -> int | None:
    """The spec's `eval.*_max_new_tokens` for `evaluator`: grounding, or navigation (offline and online);
    None (the evaluator's own) for other registered evaluators."""
    if evaluator == "grounding":
        return int(eval_spec.grounding_max_new_tokens)
    if evaluator in ("nav_offline", "nav_offline_low", "online_sim"):
        return int(eval_spec.navigation_max_new_tokens)
    return None


def evaluator_for_dataset(data: str | Path) -> str:
    """`grounding` or `nav_offline`, from the kind of the dataset's first record."""
    from venus_core.data.store import DatasetReader

    for record in DatasetReader(data):
        if record.kind == "grounding":
            return "grounding"
        if record.kind in ("trajectory", "navigation_step"):
            return "nav_offline"
        raise ValueError(f"{data}: first record {record.id!r} is a {record.kind!r} record; "
                         "no evaluator for it (expected grounding, trajectory or navigation_step)")
    raise ValueError(f"{data}: dataset has no records")


def parse_model_ref(ref: str) -> tuple[str, str]:
    """`NAME=CKPT` -> (NAME, CKPT); a bare `CKPT` is named after its last path component."""
    name, sep, ckpt = ref.partition("=")
    if not sep:
        ckpt = ref
        name = Path(ref.rstrip("/")).name or ref
    if not name.strip() or not ckpt.strip():
        raise ValueError(f"model reference {ref!r}: expected CKPT or NAME=CKPT")
    return name.strip(), ckpt.strip()


def make_predictor(
    name: str,
    checkpoint: str,
    model_spec: Any,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    batch_size: int = 16,
    temperature: float = DEFAULT_TEMPERATURE,
    repetition_penalty: float = DEFAULT_REPETITION_PENALTY,
    tiny_dir: str | Path | None = None,
    device: str | Any = "auto",
    require_manifest: bool = True,
) -> Predictor:
    """A predictor for one model: the served model `checkpoint` at `base_url`, or a local checkpoint.

    `checkpoint` "tiny" builds (or reuses) the tiny default in `tiny_dir`. A local checkpoint goes
    on `device` ("auto": the GPU when there is one, `models.placement.resolve_device`), verified
    first (`models.integrity`): with `require_manifest` (a stage's output, the evaluate job) it
    must have its SHA256SUMS; without (a directory a user names to `venus eval`, e.g. a plain
    `save_pretrained` one) SHA256SUMS is checked when present.
    """
    if base_url:
        return OpenAIPredictor(base_url, checkpoint, api_key=api_key, name=name, concurrency=batch_size,
                               temperature=temperature, repetition_penalty=repetition_penalty)
    from venus_core.models.loading import load_model

    if checkpoint != "tiny" and not Path(checkpoint).is_dir():
        raise FileNotFoundError(f"model {name!r}: checkpoint directory {checkpoint} does not exist")
    model, processor = load_model(checkpoint, model_spec, device, tiny_dir=tiny_dir,
                                  require_manifest=require_manifest)
    return LocalPredictor(model, processor, name=name, batch_size=batch_size, temperature=temperature,
                          repetition_penalty=repetition_penalty)


def get_evaluator(name: str) -> Callable[..., EvalResult]:
    """The registered evaluator `name` (unknown names list the known ones)."""
    return EVAL_SUITES.get(name)  # type: ignore[no-any-return]
