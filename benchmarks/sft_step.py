"""Benchmark: one SFT training step on venus-tiny's long navigation prompts, before and after the
two changes to `train.sft.train_sft`'s forward pass:

- `models.batches.without_padding_mask`: a right-padded batch goes in without its attention mask,
  so sdpa runs its causal kernel (it skips the masked half of the score matrix) instead of the
  masked one; the loss and gradients are the same up to float order.
- `AttentionSupervision.recording`: the attention-supervision term reads the softmax rows of its
  few supervised positions from the supervised layer's sdpa call, instead of switching every layer
  to eager attention and returning every layer's full probability matrix.

Rows (medians of the timed steps, forward + backward, no optimizer): `plain, mask` is the
baseline every SFT step paid before, `plain` the step of today; `supervised, eager + mask` the
baseline of a `mid_train.attention_supervision` step (the bootstrap's level-1/2 navigation
stages), `supervised, recording` the step of today. Each row's loss (and the supervised term) is
printed: the paired rows agree to float order.

Inputs like real ones: the shipped bootstrap checkpoint (or `--model`), `--rows` fresh level-`--level`
navigation records of the synthetic world (the bootstrap's level-2 stages: ~1,000-1,180 tokens a
row, one 128 x 128 screenshot), batch 16 as `agents/venus-tiny` trains.

    OMP_NUM_THREADS=2 python benchmarks/sft_step.py [--steps 5] [--rows 16] [--level 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from venus_core.config.spec import ModelSpec
from venus_core.config.training import AttentionSupervisionSpec
from venus_core.data.synth import synthesize
from venus_core.models.batches import collate, without_padding_mask
from venus_core.models.loading import load_model
from venus_core.train.attention_supervision import AttentionSupervision, eager_attention
from venus_core.train.data import load_corpus


def _time(step: Callable[[], tuple[float, float]], steps: int) -> tuple[float, float, float]:
    step()  # warm-up
    times, loss, sup = [], 0.0, 0.0
    for _ in range(steps):
        t = time.perf_counter()
        loss, sup = step()
        times.append(time.perf_counter() - t)
    return statistics.median(times), loss, sup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bootstrap", help="model directory or 'bootstrap' (the shipped checkpoint)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--level", type=int, default=2)
    args = ap.parse_args()

    from venus_core.train.base import BOOTSTRAP_DIR

    model, proc = load_model(BOOTSTRAP_DIR if args.model == "bootstrap" else Path(args.model), ModelSpec())
    with tempfile.TemporaryDirectory() as tmp:
        synthesize("navigation", max(args.rows, 8), args.level, 424242, Path(tmp) / "nav", platform="both")
        corpus = load_corpus([Path(tmp) / "nav"], validation_fraction=0.0, history_len=5, seed=0)
        items = corpus.train["navigation"][: args.rows]
        batch = collate([it.example() for it in items], proc, max_length=1536)
    bare = without_padding_mask(batch)
    sup = AttentionSupervision(AttentionSupervisionSpec(weight=1.0), proc.tokenizer,  # type: ignore[attr-defined]
                               int(model.config.image_token_id), int(model.config.vision_config.spatial_merge_size))
    targets = sup.targets(batch["input_ids"], batch["labels"], batch["image_grid_thw"])
    model.train()

    def plain(inputs: dict[str, torch.Tensor]) -> Callable[[], tuple[float, float]]:
        def run() -> tuple[float, float]:
            model.zero_grad(set_to_none=True)
            out = model(**inputs)
            out.loss.backward()
            return float(out.loss.detach()), 0.0
        return run

    def eager() -> tuple[float, float]:
        model.zero_grad(set_to_none=True)
        with eager_attention(model):
            out = model(**batch, output_attentions=True)
        att = sup.loss(out.attentions, batch["input_ids"], batch["labels"], batch["image_grid_thw"])
        assert att is not None
        (out.loss + att).backward()
        return float(out.loss.detach()), float(att.detach())

    def recording() -> tuple[float, float]:
        model.zero_grad(set_to_none=True)
        with sup.recording(model, targets) as rec:
            out = model(**bare)
        att = sup.recorded_loss(rec)
        assert att is not None
        (out.loss + att).backward()
        return float(out.loss.detach()), float(att.detach())

    lengths = batch["attention_mask"].sum(dim=1)
    print(f"batch: {len(items)} level-{args.level} navigation rows, {int(lengths.min())}-{int(lengths.max())} tokens "
          f"(padded to {batch['input_ids'].shape[1]}), {len(targets)} supervised rows; torch threads "
          f"{torch.get_num_threads()}; {args.steps} timed steps per row after one warm-up")
    rows = [("plain, mask (baseline)", plain(batch)), ("plain, no mask", plain(bare)),
            ("supervised, eager + mask (baseline)", eager), ("supervised, recording, no mask", recording)]
    got = {name: _time(fn, args.steps) for name, fn in rows}
    print(f"{'step':40s} {'median s':>9s} {'loss':>10s} {'attn term':>10s}")
    for name, (t, loss, att) in got.items():
        print(f"{name:40s} {t:9.3f} {loss:10.6f} {att:10.6f}")
    base_p, new_p = got[rows[0][0]][0], got[rows[1][0]][0]
    base_s, new_s = got[rows[2][0]][0], got[rows[3][0]][0]
    print(f"plain step: {new_p / base_p:.2f}x the baseline's time ({base_p / new_p:.2f}x faster); "
          f"supervised step: {new_s / base_s:.2f}x ({base_s / new_s:.2f}x faster)")


if __name__ == "__main__":
    main()
