"""Configuration: the agent spec (pydantic), YAML loading with overrides, and the registries.

This package is the bottom of the import graph: it imports nothing else from venus_core.
"""

from venus_core.config.loader import (
    SpecError,
    apply_overrides,
    dump_spec,
    load_spec,
    spec_from_dict,
    spec_hash,
    spec_to_dict,
)
from venus_core.config.registry import (
    ACTION_SPACES,
    ENVS,
    EVAL_SUITES,
    GENERATION_BACKENDS,
    IMPORTERS,
    JUDGES,
    MERGE_METHODS,
    REWARDS,
    SYNTH_APPS,
    Registry,
    RegistryError,
    load_plugins,
    registry,
    registry_kinds,
)
from venus_core.config.spec import AgentSpec

__all__ = [
    "ACTION_SPACES", "ENVS", "EVAL_SUITES", "GENERATION_BACKENDS", "IMPORTERS", "JUDGES",
    "MERGE_METHODS", "REWARDS", "SYNTH_APPS", "AgentSpec", "Registry", "RegistryError", "SpecError",
    "apply_overrides", "dump_spec", "load_plugins", "load_spec", "registry", "registry_kinds",
    "spec_from_dict", "spec_hash", "spec_to_dict",
]
