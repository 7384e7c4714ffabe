"""Grounding evaluation throughput: batched vs one-by-one generation on the tiny default model.

Why: evaluation runs after every stage and on every held-out set, so how much batching buys on
the in-process backend decides whether `eval.batch_size` matters on a laptop / CI. Both runs use
the same untrained tiny Qwen3-VL (`build_tiny`), the same synthetic grounding set and greedy
decoding with repetition penalty 1.05 (the UI-Venus evaluation setting), one thread; answers run
to the end token or `--max-new-tokens`. One run of each
(after one warm-up batch), printed with the ratio and the command that made them.

    .venv/bin/python benchmarks/eval_grounding.py [--n 32] [--batch-size 16] [--max-new-tokens 32]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from venus_core.config import AgentSpec
from venus_core.data.synth import synthesize
from venus_core.eval.grounding import evaluate_grounding
from venus_core.eval.predictors import LocalPredictor
from venus_core.models.loading import load_model


def timed(data: Path, predictor: LocalPredictor, max_new_tokens: int) -> tuple[float, int]:
    start = time.perf_counter()
    res = evaluate_grounding(data, predictor, max_new_tokens=max_new_tokens)
    return time.perf_counter() - start, len(res.samples)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=32, help="grounding samples")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=32)
    args = p.parse_args()
    torch.set_num_threads(1)
    spec = AgentSpec()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "held-out"
        synthesize("grounding", args.n, 1, 0, data)
        model, processor = load_model("tiny", spec.model, tiny_dir=Path(tmp) / "tiny")
        batched = LocalPredictor(model, processor, name="tiny", batch_size=args.batch_size)
        single = LocalPredictor(model, processor, name="tiny", batch_size=1)
        evaluate_grounding(data, batched, limit=min(args.n, args.batch_size), max_new_tokens=args.max_new_tokens)
        t_batched, n = timed(data, batched, args.max_new_tokens)
        t_single, _ = timed(data, single, args.max_new_tokens)
    rate_b, rate_s = n / t_batched, n / t_single
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"tiny Qwen3-VL, {n} synthetic grounding samples (level 1, 128x128), {args.max_new_tokens} new tokens, 1 thread")
    print(f"batched (batch {args.batch_size}): {rate_b:.2f} samples/s ({t_batched:.1f} s)")
    print(f"one by one:          {rate_s:.2f} samples/s ({t_single:.1f} s)")
    print(f"ratio batched / one-by-one: {rate_b / rate_s:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
