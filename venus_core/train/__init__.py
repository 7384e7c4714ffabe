"""Training: mid-training (SFT on the domain mixture), distributed launch, checkpoints, bootstrap.

`sft` (the trainer), `mixture` (per-batch domain sampler), `schedule` (warm-up + cosine with
floor), `checkpoint` (atomic, resumable), `data` (datasets -> pools, episode-level held-out split),
`evaluate` / `heldout` (greedy held-out scoring with intervals; fixed synthetic sets),
`distributed` (torchrun / DDP, DeepSpeed config) and `ds_backend` (DeepSpeed engine, GPU only),
`base` (model.base -> checkpoint), `bootstrap` (`venus bootstrap`), `tracker` (logging interface).
Submodules are imported explicitly: most of them need torch and transformers.
"""
