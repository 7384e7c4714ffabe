"""Training: the tracking interface trainers log through (`tracker`), mid-training (SFT on the
domain mixture), distributed launch and checkpoints."""
