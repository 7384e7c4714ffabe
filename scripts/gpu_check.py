"""Device check (issue 20 §4): the project's GPU code paths, once each, at a small size, with figures.

    scripts/gpu_check.sh [--cpu-dry-run] [--out FILE] [--workdir DIR] [--budget-s 480]
    python scripts/gpu_check.py ...same options...         (the wrapper picks the Python, see below)

Pieces, each through the project's own code (nothing here re-implements a trainer or a server):
- `devices`: the start-up check (`models.placement.check_gpus` / `job_device`): the tiny spec asking
  one GPU per stage, and the 8B spec's requests, against `torch.cuda.device_count()`. On a GPU run
  without a usable GPU the check stops here (exit 2), as a pod would.
- `grpo`: steps of `rl.grpo.OfflineGRPO` on the tiny Qwen3-VL of the spec (`model.tiny`, randomly
  initialised, as `benchmarks/grpo_step.py` does) and synthetic grounding screens, bf16 weights on
  cuda:0 (fp32 on the CPU in the dry run): step seconds, peak CUDA memory, loss finiteness, the share
  of weights the update changed. The reward is that benchmark's length reward. Why not the shipped
  bootstrap checkpoint: its samples within a group are identical at this size (dry run, 2026-12-04:
  both groups zero-variance), so the step skips its update and there is nothing to sync. lr 1e-3 so
  one step moves the log-probs enough for the sync check below.
- `sync_venus_serve`: `venus serve --dev-mode --worker-extension-cls VenusWorkerExtension` (a
  subprocess, on the check's device and dtype) driven by `ServerPolicy(kind="vllm")`: sampling
  (tokens/s), the weight sync of the GRPO-updated checkpoint (POST /collective_rpc
  venus_load_weights, then /reset_prefix_cache; seconds), and the server's log-probs of what it
  samples against the trainer's `sequence_logprobs` on the updated weights and on the start weights.
- `sync_vllm`: the same against a real vLLM OpenAI server started with the extension,
  `VLLM_SERVER_DEV_MODE=1` and `--logprobs-mode processed_logprobs` (as manifests/overlays/
  gpu-cluster/vllm-rollout.yaml starts it), when vllm imports and a GPU is there.
- `mid_train`: two steps of `python -m venus_core.runtime.mid_train` (the job the pipeline runs),
  under `torchrun --nproc_per_node 1` with `mid_train.distributed.backend=deepspeed` when deepspeed
  imports and a GPU is there, else backend single (bf16 autocast on the GPU, fp32 on the CPU), with
  the loss and seconds from its metrics.jsonl.
Every piece ends `"status": "ok"`, `"SKIPPED: <reason>"` or `"FAILED: <reason>"`; a failure does not
stop the others (only a GPU run without a GPU stops after `devices`). The figures are printed and
written as JSON to --out (default $VENUS_GPU_CHECK_OUT, else $OUT/gpu_check.json when $OUT is set,
else runs/gpu_check/gpu_check.json). Exit status: 0 when no piece failed, 1 when one did, 2 when the
GPU run found no GPU.

What can run where (read 2026-12-04):
- this repository's .venv (Python 3.11, torch 2.13.0+cpu): everything of `--cpu-dry-run`; vllm,
  deepspeed and flash-attn are not installed (they are the [gpu] extras, never installed on CPU
  machines). It cannot be taken to the device machine: 2.8 GB against the 64 MiB that travels, a
  CPU build of torch, and a Python 3.11 linked from this machine's pyenv.
- the lent H200 machine's image: Python 3.12 with torch 2.11 (CUDA 13), transformers 5.17,
  safetensors, tokenizers, peft, typer, rich, pillow, numpy, numba, pyyaml, requests, psutil;
  no pydantic, fastapi, starlette or uvicorn (which venus_core needs), no deepspeed, vllm or
  flash-attn, and no network. `scripts/gpu_check.sh --fetch-wheels` (here, where PyPI is reachable)
  puts the missing pure-Python pieces and a DeepSpeed wheel built without its compiled ops into
  .whl/ (about 6 MB); the wrapper installs them there into a temporary directory. With them:
  devices, grpo, sync_venus_serve and mid_train with DeepSpeed can run. vllm cannot: its wheels
  (hundreds of MB, with their own torch) do not fit what travels, so `sync_vllm` says SKIPPED there
  and `sync_venus_serve` is the weight-sync figure on the GPU. flash-attn is not on PyPI as a wheel
  (built against one torch), so attention is sdpa, as `models.placement` decides and reports.
- venus_core is not pip-installed there, so its plugin registries have no entry points: this script
  writes a dist-info with pyproject.toml's entry points into a temporary directory on sys.path
  (`ensure_entry_points`) and passes it to its subprocesses through PYTHONPATH.
Not yet run on a GPU (2026-12-04).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPEC_TINY = ROOT / "agents" / "venus-tiny"
SPEC_8B = ROOT / "agents" / "ui-venus-1.5-8b"
EXTENSION = "venus_core.rl.online.vllm_worker.VenusWorkerExtension"
PLUGIN_PROBE = "venus_core.plugins.rewards"
SKIPPED = "SKIPPED: "
FAILED = "FAILED: "
PIECES = ("devices", "grpo", "sync_venus_serve", "sync_vllm", "mid_train")
FIGURES: dict[str, tuple[str, ...]] = {
    "devices": ("cuda_device_count", "device", "tiny_spec_one_gpu", "spec_8b"),
    "grpo": ("device", "dtype", "attn_implementation", "steps", "step_s", "generate_s", "backward_s",
             "peak_cuda_mem_mib", "loss", "loss_finite", "weights_changed_frac", "max_abs_weight_change"),
    "sync_venus_serve": ("server_placement", "requests", "completion_tokens", "tokens_per_s", "sync_s",
                         "weights_version", "max_abs_logprob_diff_before_sync", "max_abs_logprob_diff_vs_trainer",
                         "max_abs_logprob_diff_vs_start", "reflects_new_weights"),
    "sync_vllm": ("requests", "completion_tokens", "tokens_per_s", "sync_s", "weights_version",
                  "max_abs_logprob_diff_before_sync", "max_abs_logprob_diff_vs_trainer",
                  "max_abs_logprob_diff_vs_start", "reflects_new_weights"),
    "mid_train": ("backend", "deepspeed", "device", "steps", "loss", "loss_finite", "train_wall_s", "s_per_step",
                  "job_wall_s"),
}
"""The figures each piece reports when its status is ok (the dry-run test checks them)."""


class Skip(Exception):
    """A piece that cannot run here; the message is the reason."""


class CheckFailed(Exception):
    """A piece that ran and found something wrong; the message says what."""


@dataclass(frozen=True)
class Size:
    prompts: int
    group: int
    tokens: int
    grpo_steps: int  # the first is a warm-up when > 1
    requests: int
    mid_train_batch: int
    synth_n: int

    @staticmethod
    def for_mode(dry_run: bool) -> Size:
        if dry_run:
            return Size(prompts=2, group=2, tokens=4, grpo_steps=1, requests=2, mid_train_batch=2, synth_n=12)
        return Size(prompts=8, group=8, tokens=16, grpo_steps=3, requests=16, mid_train_batch=8, synth_n=48)


@dataclass
class Context:
    dry_run: bool
    work: Path
    size: Size
    python: str
    device: Any = None  # torch.device once `devices` ran
    dtype_name: str = "float32"
    attn: str = "sdpa"
    trained_dir: Path | None = None  # the GRPO-updated checkpoint (signed) for the sync pieces
    shared: dict[str, Any] = field(default_factory=dict)
    deadline: float = math.inf  # time.monotonic() by which the whole check must be done (--budget-s)

    def left(self) -> float:
        return self.deadline - time.monotonic()


# ---------------------------------------------------------------------------- set-up

def write_entry_points(site: Path) -> Path:
    """A dist-info in `site` holding pyproject.toml's name, version and entry points; its path."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dist = site / f"venus_core-{project['version']}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: venus-core\nVersion: {project['version']}\n",
                                   encoding="utf-8")
    lines: list[str] = []
    for group, entries in project.get("entry-points", {}).items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {target}" for name, target in entries.items()]
        lines.append("")
    (dist / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
    return dist


def ensure_entry_points(site: Path) -> bool:
    """Make venus_core's plugin entry points visible when the package is not installed (the device
    machine runs it from the working tree): `write_entry_points` into `site`, put on sys.path and on
    PYTHONPATH for subprocesses. False when they were there already."""
    if importlib.metadata.entry_points(group=PLUGIN_PROBE):
        return False
    dist = write_entry_points(site)
    _prepend_path(site)
    importlib.invalidate_caches()
    if not importlib.metadata.entry_points(group=PLUGIN_PROBE):
        raise RuntimeError(f"{dist}: the entry points written there are not visible")
    return True


def _prepend_path(path: Path) -> None:
    sys.path.insert(0, str(path))
    old = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(path) + (os.pathsep + old if old else "")


def _version(module: str) -> str:
    """The module's version, or SKIPPED with why it is not importable."""
    if importlib.util.find_spec(module) is None:
        return f"{SKIPPED}{module} is not importable in {sys.executable}"
    try:
        mod = __import__(module)
    except Exception as exc:  # noqa: BLE001 - a broken install is reported, not raised
        return f"{SKIPPED}{module} fails to import: {type(exc).__name__}: {str(exc)[:300]}"
    return str(getattr(mod, "__version__", "unknown version"))


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(float(x))


def _round(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": "none", "MLFLOW_DISABLE_TELEMETRY": "true",
           "PYTHONUNBUFFERED": "1", **extra}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# ---------------------------------------------------------------------------- devices

def piece_devices(ctx: Context) -> dict[str, Any]:
    import torch

    from venus_core.config import load_spec
    from venus_core.models.placement import GPU_STAGES, DeviceError, check_gpus, cuda_count, gpus_requested, job_device

    n = cuda_count()
    out: dict[str, Any] = {"cuda_device_count": n, "torch": torch.__version__, "cuda_build": torch.version.cuda,
                           "device_names": [torch.cuda.get_device_name(i) for i in range(n)]}
    one_gpu = load_spec(SPEC_TINY, [f"platform.resources.{s}.gpu_count=1" for s in GPU_STAGES])
    verdicts: dict[str, str] = {}
    for stage in GPU_STAGES:
        try:
            check_gpus(stage, gpus_requested(one_gpu, stage))
            verdicts[stage] = "ok"
        except DeviceError as exc:
            verdicts[stage] = f"refused: {exc}"
    out["tiny_spec_one_gpu"] = verdicts
    big = load_spec(SPEC_8B)
    out["spec_8b"] = {}
    for stage in GPU_STAGES:
        asked = gpus_requested(big, stage)
        try:
            check_gpus(stage, asked, n)
            out["spec_8b"][stage] = f"ok ({asked} asked)"
        except DeviceError:
            out["spec_8b"][stage] = f"refused ({asked} asked, {n} seen)"
    if ctx.dry_run:
        # the start-up check must refuse a GPU request on a machine without one
        if n == 0 and any(v == "ok" for v in verdicts.values()):
            raise CheckFailed(f"check_gpus accepted a 1-GPU request with no GPU: {verdicts}")
        ctx.device = torch.device("cpu")
    else:
        if n == 0:
            raise CheckFailed(f"no usable CUDA device; the start-up check says: {verdicts['offline_rl']}")
        bad = {s: v for s, v in verdicts.items() if v != "ok"}
        if bad:
            raise CheckFailed(f"the start-up check refused a 1-GPU request on {n} GPU(s): {bad}")
        ctx.device = job_device(one_gpu, "offline_rl", "auto")  # what a job with --device auto gets
    out["device"] = str(ctx.device)
    gpu = ctx.device.type == "cuda"
    ctx.dtype_name = "bfloat16" if gpu else "float32"
    from venus_core.models.placement import flash_attn_importable

    ctx.attn = "flash_attention_2" if gpu and flash_attn_importable() else "sdpa"
    return out


# ---------------------------------------------------------------------------- grpo

def _tiny_spec(ctx: Context) -> Any:
    from venus_core.config import load_spec

    return load_spec(SPEC_TINY, [f"model.dtype={ctx.dtype_name}", f"model.attn_implementation={ctx.attn}"])


def _prompt_items(ctx: Context, n: int, seed: int) -> tuple[list[Any], Any]:
    from benchmarks.grpo_step import INSTRUCTION, prompt_text
    from venus_core.data.store import DatasetReader
    from venus_core.data.synth import synthesize
    from venus_core.models.prompts import build_messages
    from venus_core.rl.grpo import PromptItem

    out = ctx.work / f"grounding-{seed}"
    if not out.exists():
        synthesize("grounding", n, 0, seed, out)
    reader = DatasetReader(out)
    records = list(reader)[:n]
    items = [PromptItem(build_messages(reader.open_image(r.image), prompt_text("grounding")), {}, r.id)
             for r in records]
    ctx.shared["screens"] = [(r.id, reader.open_image(r.image), prompt_text("grounding"), INSTRUCTION)
                             for r in records]
    return items, reader


def _sync(device: Any) -> None:
    import torch

    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def piece_grpo(ctx: Context) -> dict[str, Any]:
    import torch

    from benchmarks.grpo_step import length_reward_value
    from venus_core.config.registry import REWARDS
    from venus_core.models.loading import load_model, save_model
    from venus_core.models.placement import describe_model
    from venus_core.rewards.base import RewardResult
    from venus_core.models.tiny import build_tiny
    from venus_core.rl.grpo import OfflineGRPO
    from venus_core.train.tracker import NullTracker

    size, spec = ctx.size, _tiny_spec(ctx)
    name = "gpu_check_length"
    if name not in REWARDS:
        REWARDS.register(name, lambda c, r, p, progress=0.0: RewardResult(length_reward_value(c), {}))
    domain = spec.offline_rl.grounding.model_copy(update={
        "reward": name, "group_size": size.group, "prompts_per_step": size.prompts, "max_new_tokens": size.tokens,
        "lr": 1e-3, "temperature": 1.0, "max_steps": size.grpo_steps})
    start_dir = ctx.work / "tiny-init"
    if not start_dir.exists():
        build_tiny(spec.model.tiny, start_dir)
    ctx.shared["start_dir"] = start_dir
    model, processor = load_model(start_dir, spec.model, ctx.device, training=True)
    placed = describe_model(model)
    items, _ = _prompt_items(ctx, size.prompts, 11)
    gpu = ctx.device.type == "cuda"
    if gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(ctx.device)
    trainer = OfflineGRPO(model, processor, domain, NullTracker())
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    rows: list[dict[str, float]] = []
    for step in range(size.grpo_steps):
        _sync(ctx.device)
        t = time.perf_counter()
        m = trainer.step(items, step)
        _sync(ctx.device)
        m["wall"] = time.perf_counter() - t
        rows.append(m)
    timed = rows[1:] if len(rows) > 1 else rows
    changed = total = 0
    biggest = 0.0
    with torch.no_grad():
        for n, p in trainer.model.named_parameters():
            if n in before:
                diff = (p.detach().float() - before[n].float()).abs()
                changed += int((diff > 0).sum())
                total += diff.numel()
                biggest = max(biggest, float(diff.max()))
    loss = float(timed[-1]["loss"])
    out: dict[str, Any] = {
        "device": placed["device"], "dtype": placed["dtype"], "attn_implementation": placed["attn_implementation"],
        "flash_attn": _version("flash_attn") if gpu else f"{SKIPPED}flash-attention needs a GPU (dry run)",
        "prompts_x_group_x_tokens": f"{size.prompts}x{size.group}x{size.tokens}", "steps": len(rows),
        "warmup_step_s": _round(rows[0]["wall"]) if len(rows) > 1 else f"{SKIPPED}one step only (dry run)",
        "step_s": _round(statistics.median(r["wall"] for r in timed)),
        "generate_s": _round(statistics.median(r["time/generate_s"] for r in timed)),
        "logprob_s": _round(statistics.median(r["time/logprob_s"] for r in timed)),
        "backward_s": _round(statistics.median(r["time/backward_s"] for r in timed)),
        "peak_cuda_mem_mib": (_round(torch.cuda.max_memory_allocated(ctx.device) / 2**20) if gpu
                              else f"{SKIPPED}no CUDA device (dry run)"),
        "loss": loss, "loss_finite": _finite(loss), "grad_norm": float(timed[-1]["grad_norm"]),
        "updated": float(timed[-1]["updated"]), "groups_zero_variance": float(timed[-1]["groups/zero_variance"]),
        "weights_changed_frac": _round(changed / max(1, total)), "max_abs_weight_change": _round(biggest),
    }
    trained = trainer.trained_model().eval()
    ctx.trained_dir = save_model(trained, processor, ctx.work / "weights" / "v00001")
    ctx.shared.update(trained=trained, processor=processor, model_spec=spec.model)
    if not out["loss_finite"]:
        raise CheckFailed(f"GRPO loss is {loss}", out)
    if changed == 0:
        raise CheckFailed("the GRPO step changed no weight", out)
    return out


# ---------------------------------------------------------------------------- weight sync

def _learner_logprobs(model: Any, processor: Any, requests: Sequence[Any],
                      ids: Sequence[Sequence[int]]) -> list[list[float]]:
    """The trainer's per-token log-probs (`sequence_logprobs`, T=1) of the given completions."""
    import torch

    from venus_core.models.prompts import build_messages
    from venus_core.rl.rollout import completions_batch, sequence_logprobs

    batch = completions_batch(processor, [build_messages(r.image, r.prompt) for r in requests], ids)
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, batch, temperature=1.0)
    return [lp[i, : len(c)].float().tolist() for i, c in enumerate(ids)]


def _gap(answers: Sequence[Any], learner: Sequence[Sequence[float]]) -> float:
    gaps = [abs(s - t) for a, row in zip(answers, learner, strict=True) if a.logprobs is not None
            for s, t in zip(a.logprobs, row, strict=True)]
    if not gaps:
        raise CheckFailed("the server reported no log-probs to compare")
    return max(gaps)


def run_sync(ctx: Context, base_url: str, served_name: str) -> dict[str, Any]:
    """Sample, sync the GRPO-updated weights through ServerPolicy(kind="vllm"), sample again; the
    server's log-probs against the trainer's on the updated and on the start weights."""
    from venus_core.envs.base import Task
    from venus_core.models.loading import load_model
    from venus_core.rl.online.policy_http import ServerPolicy, learner_token_ids
    from venus_core.rl.online.rollout import StepRequest

    if ctx.trained_dir is None or "trained" not in ctx.shared:
        raise Skip("no GRPO-updated checkpoint to sync (the grpo piece did not finish)")
    trained, processor = ctx.shared["trained"], ctx.shared["processor"]
    start, _ = load_model(ctx.shared["start_dir"], ctx.shared["model_spec"], ctx.device)
    screens = ctx.shared["screens"]
    reqs = []
    for i in range(ctx.size.requests):  # the GRPO piece's screens, repeated as replicas
        sid, img, prompt, goal = screens[i % len(screens)]
        reqs.append(StepRequest(f"{sid}#{i}", img, prompt, Task(goal=goal)))
    policy = ServerPolicy(base_url, served_name, temperature=1.0, max_new_tokens=ctx.size.tokens, seed=0,
                          timeout=120.0, concurrency=8, load_timeout=300.0, kind="vllm",
                          **learner_token_ids(trained, processor))
    t = time.perf_counter()
    first = policy.act(reqs)
    gen_s = time.perf_counter() - t
    tokens = sum(len(a.token_ids or ()) for a in first)
    gap_before = _gap(first, _learner_logprobs(start, processor, reqs, [a.token_ids or () for a in first]))
    t = time.perf_counter()
    version = policy.load_weights(ctx.trained_dir)
    sync_s = time.perf_counter() - t
    after = policy.act(reqs)
    ids = [a.token_ids or () for a in after]
    gap_new = _gap(after, _learner_logprobs(trained, processor, reqs, ids))
    gap_old = _gap(after, _learner_logprobs(start, processor, reqs, ids))
    out: dict[str, Any] = {
        "requests": len(reqs), "completion_tokens": tokens, "generate_s": _round(gen_s),
        "tokens_per_s": _round(tokens / gen_s) if gen_s > 0 else float("nan"),
        "sync_s": _round(sync_s), "weights_version": version,
        "answers_without_logprobs": sum(a.logprobs is None for a in first + after),
        "max_abs_logprob_diff_before_sync": _round(gap_before),
        "max_abs_logprob_diff_vs_trainer": _round(gap_new), "max_abs_logprob_diff_vs_start": _round(gap_old),
        "reflects_new_weights": gap_new < gap_old,
    }
    if version != 1:
        raise CheckFailed(f"the server answered weights version {version} after the first sync", out)
    if not out["reflects_new_weights"]:
        raise CheckFailed("after the sync the server's log-probs are no closer to the updated weights than to "
                          "the start weights", out)
    return out


class _Lines:
    """A subprocess's output lines, kept (for the report) and watched (for the start-up line)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.proc = proc
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def tail(self, n: int = 15) -> str:
        return "\n".join(self.lines[-n:])

    def wait_for(self, ok: Callable[[], str | None], timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = ok()
            if found is not None:
                return found
            if self.proc.poll() is not None:
                time.sleep(0.5)  # let the reader take the last lines
                raise CheckFailed(f"{what} exited with {self.proc.returncode} before it served:\n{self.tail()}")
            time.sleep(0.25)
        raise CheckFailed(f"{what} did not start within {timeout:.0f} s:\n{self.tail()}")


@contextlib.contextmanager
def _server(cmd: Sequence[str], env: dict[str, str]) -> Iterator[_Lines]:
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=ROOT)
    lines = _Lines(proc)
    try:
        yield lines
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def piece_sync_venus_serve(ctx: Context) -> dict[str, Any]:
    if ctx.trained_dir is None:
        raise Skip("no GRPO-updated checkpoint to sync (the grpo piece did not finish)")
    cmd = [ctx.python, "-c", "from venus_core.cli import main; main()", "serve",
           "--model", str(ctx.shared["start_dir"]),
           "--name", "tiny", "--port", "0", "--device", str(ctx.device), "--spec", str(SPEC_TINY),
           "--set", f"model.dtype={ctx.dtype_name}", "--set", f"model.attn_implementation={ctx.attn}",
           "--dev-mode", "--worker-extension-cls", EXTENSION, "--max-batch", "8"]
    if ctx.dry_run:
        cmd += ["--threads", "1"]
    env = _child_env(VENUS_WEIGHTS_ROOT=str(ctx.work / "weights"))
    with _server(cmd, env) as srv:
        line = srv.wait_for(lambda: next((s for s in srv.lines if s.startswith("serving ")), None),
                            max(30.0, min(300.0, ctx.left())), "venus serve")
        placed = next((s.removeprefix("model on ") for s in srv.lines if s.startswith("model on ")), "unknown")
        base_url = line.split(" at ", 1)[1].split()[0]
        out = {"server_placement": placed, **run_sync(ctx, base_url, "tiny")}
    return out


def piece_sync_vllm(ctx: Context) -> dict[str, Any]:
    if ctx.device is None or ctx.device.type != "cuda":
        raise Skip("vLLM needs a CUDA device (dry run)")
    version = _version("vllm")
    if version.startswith(SKIPPED):
        raise Skip(version.removeprefix(SKIPPED) + " (not in the device image; its wheels, hundreds of MB with "
                   "their own torch, do not fit what travels to the device machine)")
    if ctx.trained_dir is None:
        raise Skip("no GRPO-updated checkpoint to sync (the grpo piece did not finish)")
    import requests

    port = _free_port()
    cmd = [ctx.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(ctx.shared["start_dir"]),
           "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16",
           "--max-model-len", "4096", "--gpu-memory-utilization", "0.25", "--enforce-eager",
           "--limit-mm-per-prompt", '{"image": 1}', "--worker-extension-cls", EXTENSION,
           "--logprobs-mode", "processed_logprobs"]
    env = _child_env(VLLM_SERVER_DEV_MODE="1", VLLM_NO_USAGE_STATS="1",
                     VENUS_WEIGHTS_ROOT=str(ctx.work / "weights"))
    root = f"http://127.0.0.1:{port}"

    def healthy() -> str | None:
        try:
            return "up" if requests.get(root + "/health", timeout=2).status_code == 200 else None
        except requests.RequestException:
            return None

    with _server(cmd, env) as srv:
        t = time.perf_counter()
        srv.wait_for(healthy, max(30.0, min(300.0, ctx.left() - 120)), "vllm serve")
        out = {"vllm": version, "startup_s": _round(time.perf_counter() - t), **run_sync(ctx, root + "/v1", "tiny")}
    return out


# ---------------------------------------------------------------------------- mid-training

def piece_mid_train(ctx: Context) -> dict[str, Any]:
    from venus_core.data.synth import synthesize

    gpu = ctx.device is not None and ctx.device.type == "cuda"
    ds_version = _version("deepspeed") if gpu else f"{SKIPPED}DeepSpeed's engine needs a CUDA device (dry run)"
    use_ds = not ds_version.startswith(SKIPPED)
    data = [ctx.work / "mt-grounding", ctx.work / "mt-mixture"]
    if not data[0].exists():
        synthesize("grounding", ctx.size.synth_n, 0, 21, data[0])
        synthesize("mixture", ctx.size.synth_n, 2, 22, data[1])
    out_dir = ctx.work / ("mid_train-deepspeed" if use_ds else "mid_train-single")
    backend = "deepspeed" if use_ds else "single"
    launcher = ([ctx.python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"] if use_ds
                else [ctx.python])
    cmd = [*launcher, "-m", "venus_core.runtime.mid_train", "--spec", str(SPEC_TINY), "--out", str(out_dir),
           "--device", str(ctx.device), "--eval-limit", "2",
           "--set", "mid_train.max_steps=2", "--set", "mid_train.warmup_steps=0",
           "--set", f"mid_train.batch_size={ctx.size.mid_train_batch}", "--set", "mid_train.grad_accum=1",
           "--set", "mid_train.eval_every=100", "--set", "mid_train.save_every=100",
           "--set", f"mid_train.distributed.backend={backend}", "--set", "data.validation_fraction=0.2",
           "--set", f"model.attn_implementation={ctx.attn}"]
    for d in data:
        cmd += ["--data", str(d)]
    env = _child_env(**({"OMP_NUM_THREADS": "1"} if ctx.dry_run else {}))
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=max(30.0, ctx.left()))
    job_s = time.perf_counter() - t
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        raise CheckFailed(f"mid_train ({backend}) exited with {proc.returncode}:\n{tail}",
                          {"backend": backend, "deepspeed": ds_version})
    report = json.loads((out_dir / "report.json").read_text(encoding="utf-8"))
    metrics = [r for r in (json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines())
               if r.get("kind") == "metrics" and "train/loss" in r.get("metrics", {})]
    if not metrics:
        raise CheckFailed(f"{out_dir}/metrics.jsonl has no train/loss", {"backend": backend, "deepspeed": ds_version})
    last = metrics[-1]
    loss, wall = float(last["metrics"]["train/loss"]), float(last["metrics"]["time/wall_s"])
    steps = int(report["steps"])
    out: dict[str, Any] = {
        "backend": report["backend"], "deepspeed": ds_version, "device": str(ctx.device),
        "zero_stage": (_tiny_spec(ctx).mid_train.distributed.zero_stage if use_ds
                       else f"{SKIPPED}backend {backend}"),
        "steps": steps, "loss": loss,
        "loss_finite": _finite(loss), "train_wall_s": _round(wall), "s_per_step": _round(wall / max(1, steps)),
        "job_wall_s": _round(job_s),
    }
    if report["backend"] != backend or steps != 2:
        raise CheckFailed(f"mid_train ran backend {report['backend']} for {steps} steps; wanted {backend} for 2", out)
    if not out["loss_finite"]:
        raise CheckFailed(f"mid_train loss is {loss}", out)
    return out


# ---------------------------------------------------------------------------- driver

RUNNERS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "devices": piece_devices, "grpo": piece_grpo, "sync_venus_serve": piece_sync_venus_serve,
    "sync_vllm": piece_sync_vllm, "mid_train": piece_mid_train,
}


def run_piece(name: str, ctx: Context) -> dict[str, Any]:
    t = time.perf_counter()
    try:
        result = {"status": "ok", **RUNNERS[name](ctx)}
    except Skip as exc:
        result = {"status": f"{SKIPPED}{exc}"}
    except CheckFailed as exc:
        partial = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], dict) else {}
        result = {"status": f"{FAILED}{exc.args[0]}", **partial}
    except Exception as exc:  # noqa: BLE001 - one broken piece must not hide the others
        result = {"status": f"{FAILED}{type(exc).__name__}: {str(exc)[:1500]}",
                  "traceback": traceback.format_exc(limit=8)[-3000:]}
    result["piece_s"] = _round(time.perf_counter() - t)
    return result


def _default_out() -> Path:
    if os.environ.get("VENUS_GPU_CHECK_OUT"):
        return Path(os.environ["VENUS_GPU_CHECK_OUT"])
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "gpu_check.json"
    return ROOT / "runs" / "gpu_check" / "gpu_check.json"


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _print_piece(name: str, result: dict[str, Any]) -> None:
    print(f"== {name}: {result['status'] if result['status'] == 'ok' else result['status'][:2000]}", flush=True)
    for key, value in result.items():
        if key not in ("status", "traceback"):
            print(f"   {key}: {json.dumps(value, default=str)}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="run every piece that can run on the CPU at the smallest size (CI: the script works)")
    ap.add_argument("--out", type=Path, default=None, help="JSON file of the figures (see the docstring)")
    ap.add_argument("--workdir", type=Path, default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--budget-s", type=float, default=480.0,
                    help="wall-clock seconds for the whole check: waits and subprocesses are cut to fit, and a "
                         "piece that would start with under 30 s left is skipped (default 480: the device "
                         "machine's commands end at 600)")
    args = ap.parse_args(argv)
    out_file = args.out or _default_out()
    sys.path.insert(0, str(ROOT))  # venus_core and benchmarks from this working tree
    with contextlib.ExitStack() as stack:
        work = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="venus-gpu-check-")))
        work.mkdir(parents=True, exist_ok=True)
        wrote_entry_points = ensure_entry_points(work / "site")
        import torch

        if args.cpu_dry_run:
            torch.set_num_threads(1)
        ctx = Context(dry_run=args.cpu_dry_run, work=work, size=Size.for_mode(args.cpu_dry_run), python=sys.executable,
                      deadline=time.monotonic() + args.budget_s)
        report: dict[str, Any] = {"meta": {
            "mode": "cpu-dry-run" if args.cpu_dry_run else "gpu", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "commit": _git_commit(), "python": sys.version.split()[0], "executable": sys.executable,
            "torch": torch.__version__, "cuda_build": torch.version.cuda,
            "transformers": _version("transformers"), "deepspeed": _version("deepspeed"),
            "vllm": _version("vllm"), "flash_attn": _version("flash_attn"),
            "entry_points": "written by the check (venus_core not installed)" if wrote_entry_points else "installed",
            "size": ctx.size.__dict__}}
        print(f"gpu_check: {report['meta']['mode']}, python {report['meta']['python']}, torch {torch.__version__}",
              flush=True)
        stop: str | None = None
        for name in PIECES:
            if stop is not None:
                result = {"status": f"{SKIPPED}{stop}"}
            elif ctx.left() < 30:
                result = {"status": f"{SKIPPED}less than 30 s of the --budget-s {args.budget_s:g} s was left"}
            else:
                result = run_piece(name, ctx)
            report[name] = result
            _print_piece(name, result)
            if name == "devices" and result["status"] != "ok" and not ctx.dry_run:
                stop = "the devices check failed (no usable GPU), so nothing else ran"
            out_file.parent.mkdir(parents=True, exist_ok=True)
            out_file.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"gpu_check: figures in {out_file}", flush=True)
    if stop is not None:
        return 2
    return 1 if any(str(report[p]["status"]).startswith(FAILED) for p in PIECES) else 0


if __name__ == "__main__":
    sys.exit(main())
