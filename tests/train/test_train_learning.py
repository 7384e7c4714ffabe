"""Does mid-training learn? Held-out data never trained on, fixed seeds, 95 % intervals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from venus_core.config.spec import MixtureSpec, ModelSpec
from venus_core.config.training import MidTrainSpec
from venus_core.models.loading import load_model
from venus_core.train.data import load_corpus
from venus_core.train.distributed import DistEnv
from venus_core.train.evaluate import answer_losses, evaluate_held_out, mean_interval
from venus_core.train.sft import train_sft


@pytest.mark.slow
def test_held_out_loss_and_parse_rate_improve_beyond_their_intervals(train_tiny_dir: Path, tmp_path: Path) -> None:
    from venus_core.data.synth import synthesize

    train_dir, held_dir = tmp_path / "train", tmp_path / "held"
    synthesize("grounding", 160, 0, 21, train_dir)
    synthesize("grounding", 48, 0, 9021, held_dir)  # another seed: never trained on
    train = load_corpus([train_dir], validation_fraction=0.0, history_len=5, seed=0)
    held = load_corpus([held_dir], validation_fraction=0.0, history_len=5, seed=0).train
    model, proc = load_model(train_tiny_dir, ModelSpec())
    items = held["grounding"]

    loss_before = mean_interval(answer_losses(model, proc, items))
    parse_before = evaluate_held_out(model, proc, held)["grounding/parse"]
    cfg = MidTrainSpec(max_steps=80, batch_size=16, warmup_steps=10, save_every=80, eval_every=1000, seed=0)
    train_sft(model, proc, train, MixtureSpec(perception=0, vqa=0, grounding=1, navigation=0), cfg,
              DistEnv(0, 1, 0, torch.device("cpu"), "single"), ckpt_dir=tmp_path / "ckpt")
    loss_after = mean_interval(answer_losses(model, proc, items))
    parse_after = evaluate_held_out(model, proc, held)["grounding/parse"]

    assert loss_after[2] < loss_before[1], (loss_before, loss_after)  # upper bound after < lower bound before
    assert parse_after.interval[0] > parse_before.interval[1], (str(parse_before), str(parse_after))
