"""Benchmark: one GRPO update, ours (`venus_core.rl.OfflineGRPO`) vs TRL's `GRPOTrainer`, same model.

Both trainers get the same tiny Qwen3-VL (a fresh copy of the same weights each), the same P
grounding prompts with their screenshots, group size G, completion length, temperature 1.0, KL
coefficient, learning rate and reward, in one process. The reward is a length reward
(1 / (1 + characters)) for both, so every group has reward variance and neither trainer can skip
work: the tiny untrained model never parses a grounding answer, which would make every group
zero-variance (ours would skip them all, an unfair win). Samples/s = P·G completions trained on
per second of wall time, after one warm-up step; the figures are medians over the timed steps.

Where the time goes: ours reports generation / log-prob (reference + old policy) / loss forward
+ backward + optimizer step from its own timers; TRL's phases are measured by wrapping its
`_generate` (generation) and `_get_per_token_logps_and_entropies` (every log-prob pass, with and
without grad), the rest of its step being backward, optimizer and bookkeeping.

Every prompt uses the same instruction (the screenshots differ), so all prompts have the same
token length. With prompts of different lengths TRL 1.16 fails in its first loss forward on
Qwen3-VL (transformers 5.24) inside `get_rope_index` ("shape mismatch: value tensor of shape
[3, 114] cannot be broadcast to indexing result of shape [3, 113]"); it does not happen when all
prompts have the same length, so it looks like a padding mismatch between the ids and a per-token
field, but we did not trace it further. Ours handles mixed lengths (its tests use them).

Sampling: TRL suppresses only `<|image_pad|>`, ours all four vision tokens (a sampled
`<|vision_start|>` shifts Qwen3-VL's rope index); TRL gets the same list through
`generation_kwargs` so both sample from the same distribution.

TRL is not a dependency of the project: `pip install trl` (it pulls accelerate and datasets).

    OMP_NUM_THREADS=1 python benchmarks/grpo_step.py [--prompts 8] [--group 8] [--tokens 8] [--steps 5]
        [--prompt grounding|navigation]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch


INSTRUCTION = "the coloured button"
"""One instruction for every prompt (the screenshots differ): see the module docstring."""


def _require_trl() -> Any:
    try:
        import trl
    except ImportError:
        sys.exit("TRL is not installed; it is needed only for this benchmark: .venv/bin/pip install trl")
    return trl


def prompt_text(kind: str) -> str:
    """The UI-Venus grounding prompt (~115 tokens with the image) or the mobile navigation prompt
    (~915 tokens: where the shared-prefix passes matter most)."""
    from venus_core.models.prompts import grounding_prompt, navigation_prompt

    return grounding_prompt(INSTRUCTION) if kind == "grounding" else navigation_prompt(INSTRUCTION, [], "mobile")


def length_reward_value(text: str) -> float:
    return 1.0 / (1.0 + len(text))


def _setup(workdir: Path, n_prompts: int) -> tuple[Path, list[Any], Any]:
    from venus_core.config.spec import ModelSpec
    from venus_core.data.store import DatasetReader
    from venus_core.data.synth import synthesize
    from venus_core.models.tiny import build_tiny

    model_dir = build_tiny(ModelSpec().tiny, workdir / "tiny")
    synthesize("grounding", n_prompts, 0, 11, workdir / "data")
    reader = DatasetReader(workdir / "data")
    return model_dir, list(reader), reader


def bench_ours(model_dir: Path, records: list[Any], reader: Any, args: argparse.Namespace) -> dict[str, float]:
    from venus_core.config.registry import REWARDS
    from venus_core.config.spec import GroundingRLSpec, ModelSpec
    from venus_core.models.loading import load_model
    from venus_core.rewards.base import RewardResult
    from venus_core.rl.grpo import OfflineGRPO
    from venus_core.models.prompts import build_messages
    from venus_core.rl.grpo import PromptItem
    from venus_core.train.tracker import NullTracker

    name = "bench_length"
    if name not in REWARDS:
        REWARDS.register(name, lambda c, r, p, progress=0.0: RewardResult(length_reward_value(c), {}))
    spec = GroundingRLSpec(reward=name, group_size=args.group, prompts_per_step=args.prompts,
                           max_new_tokens=args.tokens, lr=1e-4, kl_coef=args.kl, temperature=1.0)
    model, proc = load_model(model_dir, ModelSpec())
    trainer = OfflineGRPO(model, proc, spec, NullTracker())
    items = [PromptItem(build_messages(reader.open_image(r.image), prompt_text(args.prompt)), {}, r.id)
             for r in records]
    rows: list[dict[str, float]] = []
    for step in range(args.steps + 1):
        t = time.perf_counter()
        m = trainer.step(items, step)
        m["wall"] = time.perf_counter() - t
        rows.append(m)
    timed = rows[1:]
    return {
        "step_s": statistics.median(r["wall"] for r in timed),
        "generate_s": statistics.median(r["time/generate_s"] for r in timed),
        "logprob_s": statistics.median(r["time/logprob_s"] for r in timed),
        "backward_s": statistics.median(r["time/backward_s"] for r in timed),
        "zero_variance_groups": sum(r["groups/zero_variance"] for r in timed),
    }


def _timed(obj: Any, name: str, sink: Callable[[str, float], None]) -> None:
    fn = getattr(obj, name)

    def wrapper(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            sink(name if torch.is_grad_enabled() or name == "_generate" else name + ":no_grad", time.perf_counter() - t)

    setattr(obj, name, wrapper)


def bench_trl(model_dir: Path, records: list[Any], reader: Any, args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    _require_trl()
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from venus_core.config.spec import ModelSpec
    from venus_core.models.loading import load_model
    from venus_core.rl.rollout import suppressed_token_ids

    model, proc = load_model(model_dir, ModelSpec())
    rows = [{"prompt": [{"role": "user", "content": [{"type": "image"},
                                                      {"type": "text", "text": prompt_text(args.prompt)}]}],
             "image": reader.open_image(r.image)} for r in records]
    dataset = Dataset.from_list(rows)

    def reward(completions: list[Any], **_: Mapping[str, Any]) -> list[float]:
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [length_reward_value(t) for t in texts]

    cfg = GRPOConfig(
        output_dir=str(workdir / "trl"), per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group, max_completion_length=args.tokens, temperature=1.0, top_p=1.0,
        beta=args.kl, learning_rate=1e-4, max_steps=args.steps + 1, logging_steps=1, report_to="none",
        save_strategy="no", use_cpu=True, bf16=False, seed=0, dataloader_num_workers=0,
        repetition_penalty=1.0, shuffle_dataset=False,
        # the same suppressed vision tokens as ours, so both sample from the same distribution
        generation_kwargs={"suppress_tokens": suppressed_token_ids(proc)},
    )
    steps: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a: Any, **kw: Any) -> None:
            self.t = time.perf_counter()

        def on_step_end(self, *a: Any, **kw: Any) -> None:
            steps.append(time.perf_counter() - self.t)

    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=dataset,
                          processing_class=proc, callbacks=[StepClock()])
    per_step: list[dict[str, float]] = []
    current: dict[str, float] = {}

    def sink(name: str, dt: float) -> None:
        current[name] = current.get(name, 0.0) + dt

    _timed(trainer, "_generate", sink)
    _timed(trainer, "_get_per_token_logps_and_entropies", sink)

    class PhaseClock(TrainerCallback):
        def on_step_end(self, *a: Any, **kw: Any) -> None:
            per_step.append(dict(current))
            current.clear()

    trainer.add_callback(PhaseClock())
    trainer.train()
    timed, phases = steps[1:], per_step[1:]
    med = lambda k: statistics.median(p.get(k, 0.0) for p in phases)  # noqa: E731
    out = {
        "step_s": statistics.median(timed),
        "generate_s": med("_generate"),
        "logprob_s": med("_get_per_token_logps_and_entropies:no_grad"),
        "loss_forward_s": med("_get_per_token_logps_and_entropies"),
    }
    out["backward_and_rest_s"] = out["step_s"] - out["generate_s"] - out["logprob_s"] - out["loss_forward_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--kl", type=float, default=4e-3)
    ap.add_argument("--prompt", choices=("grounding", "navigation"), default="grounding",
                    help="grounding (~115-token prompts) or mobile navigation (~915 tokens)")
    args = ap.parse_args()
    trl = _require_trl()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir, records, reader = _setup(work, args.prompts)
        ours = bench_ours(model_dir, records, reader, args)
        theirs = bench_trl(model_dir, records, reader, args, work)
    n = args.prompts * args.group
    print(f"GRPO step, tiny Qwen3-VL, {args.prompt} prompts: {args.prompts} prompts x {args.group} completions x {args.tokens} tokens, "
          f"1 thread, median of {args.steps} steps (torch {torch.__version__}, trl {trl.__version__})")
    print(f"{'':8}{'samples/s':>10}{'step s':>8}{'generate':>10}{'logprob':>9}{'loss+bwd':>10}")
    print(f"{'venus':8}{n / ours['step_s']:>10.1f}{ours['step_s']:>8.2f}{ours['generate_s']:>10.2f}"
          f"{ours['logprob_s']:>9.2f}{ours['backward_s']:>10.2f}")
    print(f"{'trl':8}{n / theirs['step_s']:>10.1f}{theirs['step_s']:>8.2f}{theirs['generate_s']:>10.2f}"
          f"{theirs['logprob_s']:>9.2f}{theirs['loss_forward_s'] + theirs['backward_and_rest_s']:>10.2f}")
    print(f"ratio venus/trl: {theirs['step_s'] / ours['step_s']:.2f}x "
          f"(zero-variance groups skipped by venus: {ours['zero_variance_groups']:.0f})")


if __name__ == "__main__":
    main()
