"""Where the merge's time goes, and how fast it could be without the threshold pass.

Runs the benchmark's TIES merge in-process on one kind's inputs (made by `run.py`: DIR holds
base/ and ft1..ft3/) and prints, per run: wall and process CPU seconds, thread CPU seconds of the
main phases (threshold samples, scan kernel, selection, radix fallback, frozen-tensor check and
copy, merge kernel, output hash and write(2)) and of the calling thread (its share is serial),
then the same merge with each tensor's plan (exact thresholds) handed over from the first run (no
sample, no scan, no selection): a lower bound for any threshold method, one-pass designs included.

    .venv/bin/python benchmarks/merge_vs_mergekit/breakdown.py --work /tmp/venus-merge-bench/full/bf16-small
"""

from __future__ import annotations

import argparse
import collections
import functools
import shutil
import threading
import time
from pathlib import Path

from venus_core.merge import MergeConfig, engine, fused, fused_engine, fused_fast, io, merge_checkpoints, select

CPU: dict[str, float] = collections.defaultdict(float)
_LOCK = threading.Lock()


def _timed(label: str, fn):  # type: ignore[no-untyped-def]
    @functools.wraps(fn)
    def run(*a, **k):  # type: ignore[no-untyped-def]
        c0 = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            with _LOCK:
                CPU[label] += time.thread_time() - c0
    return run


def _instrument() -> None:
    fused.scan_block = _timed("threshold scan kernel", fused.scan_block)
    fused.magnitude_histogram = _timed("radix fallback", fused.magnitude_histogram)
    kernel = fused_fast.kernel
    fused_fast.kernel = lambda m: _timed("merge kernel", kernel(m))  # type: ignore[assignment]
    engine.Engine._sample = _timed("threshold samples", engine.Engine._sample)  # type: ignore[method-assign]
    select.select_weighted = _timed("selection", select.select_weighted)
    select.TensorPass._cut = _timed("tie cut", select.TensorPass._cut)  # type: ignore[method-assign]
    FB = fused_engine.FusedBackend
    FB._unchanged = _timed("frozen-tensor check", FB._unchanged)  # type: ignore[method-assign]
    FB._copy_block = _timed("frozen-tensor copy", FB._copy_block)  # type: ignore[method-assign]

    # with worker threads (as here) the workers write their blocks (ShardedWriter.put -> _pwrite)
    # and the writer's own thread hashes them (_Hasher: the sha256 object's update, timed there)
    io.ShardedWriter._pwrite = _timed("output write(2)", io.ShardedWriter._pwrite)  # type: ignore[method-assign]
    update = io._Hasher.update

    def timed_update(self: io._Hasher, digest, data):  # type: ignore[no-untyped-def]
        return update(self, _TimedHash(digest), data)
    io._Hasher.update = timed_update  # type: ignore[method-assign]


class _TimedHash:
    """A sha256 object whose updates (on the hashing thread) are timed as "output sha256"."""

    def __init__(self, digest) -> None:  # type: ignore[no-untyped-def]
        self.digest = digest

    def update(self, data) -> None:  # type: ignore[no-untyped-def]
        c0 = time.thread_time()
        self.digest.update(data)
        with _LOCK:
            CPU["output sha256"] += time.thread_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="a kind's directory (base/, ft1/ .. ft3/)")
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    base, models, out = args.work / "base", [args.work / f"ft{i}" for i in (1, 2, 3)], args.work / "out_breakdown"
    if not base.is_dir():
        raise SystemExit(f"{base}: run benchmarks/merge_vs_mergekit/run.py first (it generates the inputs)")
    cfg = MergeConfig.mergekit_ties(density=0.2, weights=[1, 1, 1], threads=2)
    _instrument()
    known: dict[str, fused_engine.TensorPlan] = {}
    two_pass = fused_engine.FusedBackend.plan_tensor

    def recorded(self: engine.Engine, job: engine.TensorJob, k: int) -> fused_engine.TensorPlan:
        known[job.info.key] = got = two_pass(self, job, k)
        return got

    for label, plan in [("two-pass merge", recorded)] * args.runs + [
            ("exact thresholds given (no threshold pass)", lambda self, job, k: known[job.info.key])] * args.runs:
        fused_engine.FusedBackend.plan_tensor = plan  # type: ignore[method-assign]
        shutil.rmtree(out, ignore_errors=True)
        CPU.clear()
        c0, t0, m0 = time.process_time(), time.perf_counter(), time.thread_time()
        merge_checkpoints(base, models, out, cfg)
        wall, cpu, main = time.perf_counter() - t0, time.process_time() - c0, time.thread_time() - m0
        parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(CPU.items(), key=lambda kv: -kv[1]))
        print(f"{label}: wall {wall:.2f} s, process CPU {cpu:.2f} s, calling thread {main:.2f} s; "
              f"thread CPU s: {parts}")
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
