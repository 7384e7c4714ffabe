"""Data cleaning rules of UI-Venus-1.0, each a registered, individually switchable step.

Steps (registered in `CLEAN_STEPS` on import): `unify_scroll`, `filter_inconsistent`,
`reconstruct_info_retrieval`, `resample_actions`. `clean_dataset` runs them over a dataset
directory and reports before/after counts per step.
"""

from venus_core.data.clean import consistency, info_retrieval, resample, scroll  # noqa: F401  (register)
from venus_core.data.clean.base import (
    CLEAN_STEPS,
    DEFAULT_ORDER,
    CleanOptions,
    StepOutput,
    StepReport,
)
from venus_core.data.clean.runner import clean_dataset, clean_records

__all__ = [
    "CLEAN_STEPS",
    "DEFAULT_ORDER",
    "CleanOptions",
    "StepOutput",
    "StepReport",
    "clean_dataset",
    "clean_records",
]
