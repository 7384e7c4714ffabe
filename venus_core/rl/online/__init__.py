"""Online RL on live environments: the task pool (`tasks`: static and inferred tasks, semantic
deduplication, difficulty buckets, curriculum shares, set-aside of tasks that keep failing)."""

from venus_core.rl.online.tasks import (
    HELD_OUT_SEED_START,
    TRAIN_SEEDS,
    Bucket,
    Embedder,
    HashingEmbedder,
    PoolTask,
    TaskPool,
    bucket_of,
    dedupe,
    dynamic_tasks,
    held_out_tasks,
    miniwob_tasks,
    sim_phone_tasks,
)

__all__ = ["HELD_OUT_SEED_START", "TRAIN_SEEDS", "Bucket", "Embedder", "HashingEmbedder",
           "PoolTask", "TaskPool", "bucket_of", "dedupe", "dynamic_tasks", "held_out_tasks",
           "miniwob_tasks", "sim_phone_tasks"]
