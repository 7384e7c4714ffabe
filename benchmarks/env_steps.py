"""Benchmark: environment steps/s with 1, 2 and 4 parallel environments.

Backends:
- `miniwob`: MiniWobEnv (one browser context each, one shared headless Chromium); a step is a
  Click on the click-button task's instruction text (it does not end the episode) + the page's
  reward read + a 320x420 PNG screenshot; an episode is restarted every `--episode` steps and
  resets are timed separately (page load + seeded generation + screenshot).
- `sim-phone`: SimPhoneEnv in process (the simulated phone, no ADB transport); a step is a tap
  on the home screen + screencap.

Each parallel env is stepped by its own Python thread (WebEnv calls run concurrently on the
browser's event loop; Chromium renders each context in its own process). Figures per backend and
parallelism: steps/s over all envs, p50 / p95 step latency, resets/s. Every phase runs for
`--seconds` (after one warm-up episode per env).

    python benchmarks/env_steps.py [--backends miniwob,sim-phone] [--parallel 1,2,4] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable

from venus_core.actions import Click
from venus_core.envs import Env, MiniWobEnv, SimPhoneEnv, Task, free_task


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


class Backend:
    def __init__(self, name: str, make: Callable[[], Env], task: Callable[[Env, int], Task]) -> None:
        self.name, self.make, self.task = name, make, task


BACKENDS = {
    "miniwob": Backend("miniwob", lambda: MiniWobEnv(wait_s=0.0),
                       lambda env, seed: env.make_task("click-button", seed, max_steps=1000)),  # type: ignore[attr-defined]
    "sim-phone": Backend("sim-phone", lambda: SimPhoneEnv(transport="inprocess", size=(540, 960)),
                         lambda env, seed: free_task(seed, size=(540, 960), max_steps=1000)),
}
STEP = Click(box=(500, 100))  # miniwob: the instruction text; sim-phone: the home screen's wallpaper


def run(backend: Backend, parallel: int, seconds: float, episode: int) -> dict[str, float]:
    envs = [backend.make() for _ in range(parallel)]
    step_lat: list[list[float]] = [[] for _ in envs]
    reset_lat: list[list[float]] = [[] for _ in envs]
    start = threading.Barrier(parallel + 1)
    stop_at = [0.0]

    def work(i: int) -> None:
        env = envs[i]
        env.reset(backend.task(env, i))  # warm-up
        for _ in range(3):
            env.step(STEP)
        start.wait()
        seed, n = 1000 * i, 0
        while time.perf_counter() < stop_at[0]:
            if n % episode == 0:
                t0 = time.perf_counter()
                env.reset(backend.task(env, seed + n))
                reset_lat[i].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _, done, _ = env.step(STEP)
            step_lat[i].append(time.perf_counter() - t0)
            n += 1
            if done:
                raise RuntimeError(f"{backend.name}: the benchmark step ended the episode")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(parallel)]
    try:
        for t in threads:
            t.start()
        stop_at[0] = time.perf_counter() + 3600
        start.wait()
        t0 = time.perf_counter()
        stop_at[0] = t0 + seconds
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    finally:
        for env in envs:
            env.close()
    steps = [x for lat in step_lat for x in lat]
    resets = [x for lat in reset_lat for x in lat]
    return {"steps_per_s": len(steps) / wall, "p50_ms": 1000 * statistics.median(steps),
            "p95_ms": 1000 * pct(steps, 0.95), "resets_per_s": len(resets) / wall,
            "reset_p50_ms": 1000 * statistics.median(resets) if resets else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="miniwob,sim-phone")
    ap.add_argument("--parallel", default="1,2,4")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--episode", type=int, default=10, help="steps per episode (then a reset)")
    args = ap.parse_args()
    print(f"# env steps/s, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"{args.seconds:g} s per phase, a reset every {args.episode} steps")
    print(f"{'backend':10s} {'envs':>4s} {'steps/s':>8s} {'p50 ms':>7s} {'p95 ms':>7s} "
          f"{'resets/s':>8s} {'reset p50 ms':>12s}")
    for name in args.backends.split(","):
        backend = BACKENDS[name.strip()]
        base = None
        for p in (int(x) for x in args.parallel.split(",")):
            r = run(backend, p, args.seconds, args.episode)
            base = base or r["steps_per_s"]
            print(f"{backend.name:10s} {p:4d} {r['steps_per_s']:8.1f} {r['p50_ms']:7.1f} "
                  f"{r['p95_ms']:7.1f} {r['resets_per_s']:8.2f} {r['reset_p50_ms']:12.1f}"
                  f"   (x{r['steps_per_s'] / base:.2f} vs 1 env)", flush=True)


if __name__ == "__main__":
    main()
