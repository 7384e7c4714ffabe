"""A minimal SFT warm start for the RL tests and the GRPO learning experiment (not a trainer).

GRPO needs a policy that already answers in the right format and sometimes hits: this loop is
plain AdamW over `collate` batches (answer-only labels), the recipe measured fastest on 2 CPU cores
(batch 16, lr 2e-3, betas 0.9/0.98, clip 1). The project's mid-training stage replaces it.

Run as a script to make the learning experiment's start checkpoint:
    python tests/rl/rl_warmstart.py --data DIR --steps N --out DIR [--init CKPT]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import PreTrainedModel, ProcessorMixin

from venus_core.models.batches import Example, collate


def sft(model: PreTrainedModel, processor: ProcessorMixin, examples: Sequence[Example], steps: int,
        *, batch_size: int = 16, lr: float = 2e-3, seed: int = 0) -> list[float]:
    """`steps` AdamW steps on random batches of `examples`; returns the losses."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, betas=(0.9, 0.98))
    model.train()
    losses: list[float] = []
    for _ in range(steps):
        batch = collate(rng.sample(list(examples), min(batch_size, len(examples))), processor)
        loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def main() -> None:
    from venus_core.config.spec import ModelSpec
    from venus_core.data.store import DatasetReader
    from venus_core.models.batches import record_to_example
    from venus_core.models.loading import load_model, save_model

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny-dir", default=None, help="build/load the tiny base here (default: <out>.base)")
    ap.add_argument("--init", default=None, help="continue from this checkpoint instead of the tiny base")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--history-len", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.init:
        model, processor = load_model(args.init, ModelSpec())
    else:
        model, processor = load_model("tiny", ModelSpec(), tiny_dir=args.tiny_dir or args.out + ".base")
    reader = DatasetReader(args.data)
    records = []
    for r in reader:
        records.extend(r.to_steps(args.history_len) if r.kind == "trajectory" else [r])
    examples = [record_to_example(r, reader.open_image) for r in records]
    t = time.time()
    losses = sft(model, processor, examples, args.steps, lr=args.lr)
    print(f"{args.steps} steps in {time.time() - t:.0f} s; loss {losses[0]:.3f} -> {sum(losses[-20:]) / min(20, len(losses)):.3f}")
    save_model(model, processor, Path(args.out))


if __name__ == "__main__":
    main()
