"""Kubeflow Pipelines components, one per pipeline job (docs/architecture.md, rule 3: job = runtime module = component).

Each `components/<job>.py` holds one plain, typed function whose docstring's `Args:` / `Returns:`
become the input / output descriptions in the IR (its summary, which the IR has no field for, goes
into the pipeline description: `summary`) and whose body calls `venus_core.runtime.<job>.main`
with `--spec/--set/--out` arguments.
The function is turned into a lightweight component by `component(job, image)` here rather than by
a module-level `@dsl.component`, because the image comes from the agent spec
(`platform.images.base` / `.train`) and is only known when a pipeline is built. Lightweight
components whose body imports the installed package run both in `kfp.local.SubprocessRunner` and on
a cluster; `install_kfp_package=False` because the project images already carry kfp.

Bodies are serialized on their own by kfp (module-level helpers are not shipped), so each body
repeats the few lines that write the spec (as `<output>/agent_spec.yaml`) and build the argument list.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from kfp import dsl

from components.evaluate import evaluate
from components.generate_data import generate_data
from components.merge import merge
from components.mid_train import mid_train
from components.offline_rl import offline_rl
from components.online_rl import online_rl
from components.score_data import score_data

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "generate_data": generate_data,
    "score_data": score_data,
    "mid_train": mid_train,
    "offline_rl": offline_rl,
    "online_rl": online_rl,
    "merge": merge,
    "evaluate": evaluate,
}


def component(job: str, image: str) -> Any:
    """The lightweight KFP component of `job`, running on `image`."""
    if job not in FUNCTIONS:
        raise KeyError(f"no component for job {job!r}; known: {', '.join(FUNCTIONS)}")
    return dsl.component(FUNCTIONS[job], base_image=image, install_kfp_package=False)


def summary(job: str) -> str:
    """The first paragraph of `job`'s docstring on one line: the component's description.

    kfp turns a component docstring's `Args:` into input descriptions and its `Returns:` into output
    descriptions in the IR; the IR has no field for the summary, so the pipeline lists it instead.
    """
    doc = inspect.getdoc(FUNCTIONS[job]) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())
