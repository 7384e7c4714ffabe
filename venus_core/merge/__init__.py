"""Checkpoint merging (TIES / linear / task arithmetic) over streamed safetensors.

Importing `venus_core.merge.methods` (the plugin module) registers the methods in MERGE_METHODS.
"""

from venus_core.merge.api import MergeConfig, PartPolicy, merge_checkpoints

__all__ = ["MergeConfig", "PartPolicy", "merge_checkpoints"]
