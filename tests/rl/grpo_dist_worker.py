"""Worker of test_rl_distributed: offline GRPO on the tiny model, as one process or one rank of a
torchrun launch; writes this rank's weights and the per-step metrics rank 0 logged.

    python grpo_dist_worker.py TINY DATA OUT MODE BACKEND OPTIMIZER [lora]
    (MODE: plain | stop | resume; OPTIMIZER: adamw, the trainer's own, or sgd; lora: train LoRA
    adapters, r 4, dropout 0.05, instead of the whole weights)

Under FSDP2 a run that finishes also exports the trained model as the job does (`OfflineGRPO.
export`, `save_model`) to OUT/model.

Why SGD as an option: AdamW's first updates are sign-like (m / sqrt(v) = ±1 whatever the gradient's
size), so an element whose gradient is at rounding level moves by up to lr one way or the other;
the summation order of a two-rank all-reduce differs from one process's, and such elements then
differ by a sizeable share of lr. With SGD the update is linear in the gradient and the weights
compare tightly: that is the check that the averaged gradients are the one-process ones.
"""

from __future__ import annotations

import faulthandler
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).parent))  # rl_helpers: the test-only reward

from rl_helpers import LENGTH_REWARD  # noqa: E402

from venus_core.config.spec import GroundingRLSpec, ModelSpec  # noqa: E402
from venus_core.config.training import LoraSpec, RLDistributedSpec  # noqa: E402
from venus_core.data.store import DatasetReader  # noqa: E402
from venus_core.models.loading import load_model, save_model  # noqa: E402
from venus_core.rl.distributed import full_state_dict  # noqa: E402
from venus_core.rl.grpo import OfflineGRPO  # noqa: E402
from venus_core.rl.prompts import grounding_item  # noqa: E402
from venus_core.runtime.rl_checkpoint import Checkpointing, StoppedAt  # noqa: E402
from venus_core.train.distributed import DistEnv, setup, teardown  # noqa: E402
from venus_core.train.tracker import MemoryTracker, NullTracker  # noqa: E402

STEPS = 2
HANG_S = 180  # a run takes ~10 s: past this, print every thread's stack and exit (the test shows it)


def main(tiny: str, data: str, out: str, mode: str, backend: str, optimizer: str, lora: str = "") -> None:
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    torch.set_num_threads(1)
    env = setup(RLDistributedSpec(backend=backend), "cpu")  # type: ignore[arg-type]
    finished = False
    try:
        # the trainer (and its DDP / FSDP2 wrapper) is gone after it
        _train(env, tiny, data, out, mode, optimizer, lora == "lora")
        finished = True
    finally:
        teardown(synchronize=finished)  # as the jobs do (runtime.offline_rl)


def _train(env: DistEnv, tiny: str, data: str, out: str, mode: str, optimizer: str, lora: bool) -> None:
    model, proc = load_model(tiny, ModelSpec())
    reader = DatasetReader(data)
    items = [grounding_item(r, reader.open_image) for r in list(reader)[: 4 * STEPS]]
    spec = GroundingRLSpec(reward=LENGTH_REWARD, group_size=4, prompts_per_step=4, max_new_tokens=6, lr=1e-2,
                           kl_coef=4e-3, max_steps=STEPS, save_every=1, lora=LoraSpec(enabled=lora, r=4))
    tracker = MemoryTracker() if env.is_main else NullTracker()
    trainer = OfflineGRPO(model, proc, spec, tracker, minibatches=2, env=env)
    if optimizer == "sgd":
        trainer.optimizer = torch.optim.SGD(trainer.params, lr=spec.lr)
    root = Path(out) / "ckpt" if mode in ("stop", "resume") else None
    ckpt = Checkpointing(root, trainer, None, spec.save_every, stop_at=1 if mode == "stop" else None)
    try:
        trainer.train(lambda epoch: items, on_step=ckpt.on_step, resume=ckpt.restore())
    except StoppedAt:
        return
    weights = full_state_dict(trainer.model, env) if env.backend == "fsdp2" else trainer.model.state_dict()
    if weights is not None:
        save_file({k: v.detach().contiguous() for k, v in weights.items()}, str(Path(out) / f"rank{env.rank}.safetensors"),
                  metadata={"backend": env.backend, "world": str(env.world)})
    if env.backend == "fsdp2":
        exported, merged = trainer.export()  # every rank joins the gather
        if env.is_main:
            save_model(exported, proc, Path(out) / "model", state_dict=merged)
    if env.is_main:
        steps = [m for _, m in tracker.metrics]  # type: ignore[attr-defined]
        (Path(out) / "metrics.json").write_text(json.dumps(steps))


if __name__ == "__main__":
    main(*sys.argv[1:8])
