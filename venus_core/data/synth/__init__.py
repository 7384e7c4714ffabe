"""venus_core.data.synth: the synthetic GUI world (apps as state machines, renderer, planner, data).

Importing this package registers the apps in SYNTH_APPS (plugin module:
`venus_core.data.synth.apps`). Public entry points: `synthesize`, `LEVELS`, `Phone`, `render`.
"""

from venus_core.data.synth import apps  # noqa: F401  (registers the apps)
from venus_core.data.synth.generate import MIXTURE, mixture_counts, synthesize
from venus_core.data.synth.i18n import ViewContext
from venus_core.data.synth.levels import LEVELS
from venus_core.data.synth.phone import Phone, PhoneState, StepResult
from venus_core.data.synth.render import render
from venus_core.data.synth.tasks import Episode, Task, sample_episode

__all__ = ["LEVELS", "MIXTURE", "Episode", "Phone", "PhoneState", "StepResult", "Task",
           "ViewContext", "mixture_counts", "render", "sample_episode", "synthesize"]
