"""Worker of test_train_ddp: runs train_sft under torchrun and saves this rank's weights."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from venus_core.config.spec import MixtureSpec, ModelSpec
from venus_core.config.training import MidTrainSpec
from venus_core.models.loading import load_model
from venus_core.train.data import load_corpus
from venus_core.train.distributed import setup, teardown
from venus_core.train.sft import train_sft


def main(tiny: str, data: str, out: str) -> None:
    torch.set_num_threads(1)
    cfg = MidTrainSpec(max_steps=3, batch_size=2, grad_accum=2, warmup_steps=1, save_every=3, eval_every=100)
    env = setup(cfg)
    finished = False
    try:
        model, proc = load_model(tiny, ModelSpec())
        corpus = load_corpus([data], validation_fraction=0.0, history_len=5, seed=0)
        mix = MixtureSpec(perception=0, vqa=0, grounding=1, navigation=0)
        res = train_sft(model, proc, corpus, mix, cfg, env, ckpt_dir=Path(out) / "ckpt")
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(Path(out) / f"rank{env.rank}.safetensors"),
                  metadata={"backend": env.backend, "world": str(env.world), "samples": str(res.mixture["samples"])})
        finished = True
    finally:
        teardown(synchronize=finished)  # as runtime.mid_train does


if __name__ == "__main__":
    main(*sys.argv[1:4])
