"""Compile an agent spec's pipeline to KFP IR YAML (`venus compile`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kfp import compiler

from pipelines.gui_agent import build_pipeline
from venus_core.config import load_spec


def compile_pipeline(agent: str | Path, out: str | Path, overrides: Sequence[str] = ()) -> Path:
    """Load the spec (with `--set` overrides), build its pipeline and write the IR YAML to `out`."""
    spec = load_spec(agent, overrides)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(build_pipeline(spec), str(out))
    return out
