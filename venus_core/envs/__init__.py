"""venus_core.envs: GUI environments behind one interface (`Env`), registered in `ENVS`.

Importing this package registers the backends (plugin module: `venus_core.envs`):
- "android": `AndroidEnv(serial, adb_host=, adb_port=, ...)`, any ADB device through an adb server;
- "sim-phone": `SimPhoneEnv(transport="adb"|"inprocess", size=, lang=, ...)`, the synthetic
  world served as an ADB device (real adb server + adbutils) or run in process;
- "web": `WebEnv(size=, scale=, ...)`, a page in its own context of a shared headless Chromium;
- "miniwob": `MiniWobEnv(scale=, episode_ms=, ...)`, MiniWoB++ tasks (the `miniwob` package's HTML);
- "androidworld": `AndroidWorldEnv(url)`, AndroidWorld's containerized server (its emulator, tasks, scores).
Modules: `base` (Env, Task, Observation, errors), `android` (action -> adb command mapping),
`shells` (adbutils / in-process shells, private adb server), `sim_device` / `sim_shell`
(the simulated phone's commands), `sim_server` + `adb_wire` (device side of the ADB protocol),
`state_codec` (phone state as JSON for success checks), `simphone` (sim-phone env, synthetic tasks),
`browser` (shared Chromium, Playwright async loop), `web` (action -> Playwright input), `miniwob`
(MiniWoB++ tasks and rewards), `miniwob_oracle` / `miniwob_collect` (DOM-aware oracle data).
"""

from venus_core.config.registry import ENVS
from venus_core.data.synth import apps as _apps  # noqa: F401  (registers the synthetic apps)
from venus_core.envs import androidworld as _androidworld  # noqa: F401  (registers "androidworld")
from venus_core.envs.android import AndroidEnv
from venus_core.envs.miniwob import MiniWobEnv
from venus_core.envs.base import (
    DEFAULT_MAX_STEPS,
    Env,
    EnvError,
    Observation,
    Task,
    UnsupportedAction,
)
from venus_core.envs.shells import AdbServerProcess, AdbShell, CommandOutput, LocalShell
from venus_core.envs.sim_device import SimDevice
from venus_core.envs.sim_server import SimAdbServer
from venus_core.envs.simphone import (
    RemoteSimPhoneEnv,
    SimPhoneEnv,
    SynthRef,
    free_task,
    synth_packages,
    synth_plan,
    synth_task,
)
from venus_core.envs.web import WebEnv

ENVS.register("android", AndroidEnv, description="any ADB device (phone, emulator) via adbutils")
ENVS.register("sim-phone", SimPhoneEnv,
              description="simulated phone of the synthetic world, over ADB or in process")
ENVS.register("web", WebEnv, description="a web page in headless Chromium (Playwright, one context each)")
ENVS.register("miniwob", MiniWobEnv,
              description="MiniWoB++ tasks in headless Chromium, the page's own reward")

__all__ = ["DEFAULT_MAX_STEPS", "AdbServerProcess", "AdbShell", "AndroidEnv", "CommandOutput",
           "Env", "EnvError", "LocalShell", "MiniWobEnv", "Observation", "SimAdbServer", "SimDevice",
           "RemoteSimPhoneEnv", "SimPhoneEnv", "SynthRef", "Task", "UnsupportedAction", "free_task", "synth_packages",
           "synth_plan", "synth_task", "WebEnv"]
