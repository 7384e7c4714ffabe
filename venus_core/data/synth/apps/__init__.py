"""The apps of the synthetic world; importing this package registers them in SYNTH_APPS.

This module is the plugin entry point (`venus_core.plugins`: synth_apps = venus_core.data.synth.apps).
"""

from venus_core.data.synth.apps import board, form, launcher, messages, settings, shop  # noqa: F401
from venus_core.data.synth.apps.base import App, AtomicTask, GoHome, OpenApp

__all__ = ["App", "AtomicTask", "GoHome", "OpenApp"]
