"""Benchmark: `venus merge --method ties` vs mergekit's TIES on checkpoints like real fine-tunes.

One invocation runs every kind of `kinds.py` (bf16 fine-tunes with mostly-zero task vectors,
frozen parts, heavy-tailed row-correlated updates, sharded inputs with an index file, Qwen3-VL
with a vision tower and a tied or untied head, the shipped tiny bootstrap model) beside mergekit
and prints, per kind, wall time, CPU time and peak RSS of both commands (ours: the `venus` console
script's entry point, `ours.py`, at its default settings; median of --runs, RSS the largest) with
the ratios to the targets (wall <= 0.1x mergekit's, peak RSS <= 1 GiB). Then, at mergekit's
settings (`--mergekit-semantics --weights 1 1 1`), how many elements differ from mergekit's output
and why, each difference attributed by changing one ingredient at a time:
- "threshold ties": our fp32 merge with mergekit's choice of tied entries (threshold_ties="argsort")
  equals mergekit's element;
- "arithmetic": the choice of tied entries does not change our element, mergekit's arithmetic
  (arithmetic="mergekit": every step rounded to the checkpoint dtype) does;
- "ties and arithmetic": both needed; "unexplained": not even both reproduce mergekit's element;
and the parity mode (both switches) against mergekit, bitwise (target >= 99.9 % equal).

mergekit runs from its own virtual env (/tmp/venus-mergekit-venv: torch==2.13.0 CPU + mergekit,
created on first use; never a project dependency) under /usr/bin/time -v, like ours.

    .venv/bin/python benchmarks/merge_vs_mergekit/run.py                 # every kind, ~1 GB checkpoints
    .venv/bin/python benchmarks/merge_vs_mergekit/run.py --size small    # ~0.2-0.7 GB, for development
    .venv/bin/python benchmarks/merge_vs_mergekit/run.py --kinds frozen sharded --runs 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import kinds as kinds_mod  # noqa: E402  (this directory's generator)

TARGET_WALL = 0.1
TARGET_RSS_MIB = 1024
PARITY_TARGET = 99.9


def ensure_venv(venv: Path) -> Path:
    exe = venv / "bin" / "mergekit-yaml"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = str(venv / "bin" / "pip")
        subprocess.run([pip, "install", "-q", "torch==2.13.0"], check=True)
        subprocess.run([pip, "install", "-q", "mergekit"], check=True)
    if not Path("/usr/bin/time").exists():
        subprocess.run(["apt-get", "install", "-y", "-q", "time"], check=True)
    return exe


@dataclass
class Timing:
    wall: float
    cpu: float
    rss_mib: float
    merge_s: float | None = None  # ours: the merge itself, as the command reports it


class CommandFailed(RuntimeError):
    """A timed command exited non-zero; `reason` is the last error line of its output."""

    def __init__(self, cmd: str, output: str) -> None:
        errors = [line.strip() for line in output.splitlines() if re.match(r"^\w*(Error|Exception)\b", line.strip())]
        self.reason = errors[-1] if errors else output.strip().splitlines()[-1:]
        super().__init__(f"{cmd} failed:\n{output[-3000:]}")


def timed(cmd: list[str], env: dict[str, str]) -> Timing:
    """Wall seconds, CPU seconds (user + system) and peak RSS of a command under GNU time.

    CPU seconds are reported too because the benchmark machine is shared: wall time depends on
    the other load, CPU time much less."""
    res = subprocess.run(["/usr/bin/time", "-v", *cmd], env=env, capture_output=True, text=True)
    if res.returncode:
        raise CommandFailed(cmd[0], res.stdout + res.stderr.split("\tCommand being timed")[0])
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", res.stderr).group(1)) / 1024
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", res.stderr).group(1)
    secs = 0.0
    for part in wall.split(":"):
        secs = secs * 60 + float(part)
    cpu = sum(float(re.search(rf"{k} time \(seconds\): (\S+)", res.stderr).group(1)) for k in ("User", "System"))
    merge_s = None
    if res.stdout.lstrip().startswith("{"):
        merge_s = float(json.loads(res.stdout)["seconds"])
    return Timing(secs, cpu, rss, merge_s)


def _files(d: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(f, framework="pt") as h:
            out |= dict.fromkeys(h.keys(), f)
    return out


@dataclass
class Parity:
    elements: int = 0
    differ: int = 0  # ours (mergekit's settings) vs mergekit
    ties: int = 0
    arithmetic: int = 0
    both: int = 0
    unexplained: int = 0
    parity_differ: int = 0  # the parity mode vs mergekit
    max_diff: float = 0.0
    max_diff_key: str = ""
    only_one_side: list[str] = field(default_factory=list)

    def equal_pct(self, differ: int) -> float:
        return 100.0 * (self.elements - differ) / max(self.elements, 1)


ROWS = 1 << 22  # elements compared at a time (four outputs: bounded memory)


def attribute(ours: Path, ties_only: Path, parity: Path, mergekit: Path) -> Parity:
    """Compare our output at mergekit's settings (A), the same with mergekit's tie order (D) and
    the parity mode (C) with mergekit's (M), element by element (module docstring)."""
    fa, fd, fc, fm = (_files(d) for d in (ours, ties_only, parity, mergekit))
    res = Parity(only_one_side=sorted(set(fa) ^ set(fm)))
    for key in sorted(set(fa) & set(fm)):
        with safe_open(fa[key], framework="pt") as ha, safe_open(fd[key], framework="pt") as hd, \
                safe_open(fc[key], framework="pt") as hc, safe_open(fm[key], framework="pt") as hm:
            shape = ha.get_slice(key).get_shape()
            rows = shape[0] if shape else 1
            step = max(1, rows * ROWS // max(1, math.prod(shape)))
            for r0 in range(0, rows, step):
                a, d, c, m = (h.get_slice(key)[r0:r0 + step].reshape(-1) for h in (ha, hd, hc, hm))
                bits = [x.view(torch.int16) if x.element_size() == 2 else x.view(torch.int32) for x in (a, d, c, m)]
                ab, db, cb, mb = bits
                wrong = ab != mb
                res.elements += a.numel()
                res.differ += int(wrong.sum())
                res.parity_differ += int((cb != mb).sum())
                explained = cb == mb
                by_ties = wrong & (db == mb)
                by_arith = wrong & ~by_ties & (ab == db) & explained
                res.ties += int(by_ties.sum())
                res.arithmetic += int(by_arith.sum())
                res.both += int((wrong & ~by_ties & ~(ab == db) & explained).sum())
                res.unexplained += int((wrong & ~by_ties & ~explained).sum())
                if bool(wrong.any()):
                    diff = float((a.float() - m.float()).abs().max())
                    if diff > res.max_diff:
                        res.max_diff, res.max_diff_key = diff, key
    return res


def parity_merges(base: Path, fts: list[Path], work: Path, density: float) -> dict[str, float]:
    """Our merge with mergekit's tie order (D) and in the parity mode (C), in this process; seconds."""
    from venus_core.merge import MergeConfig, merge_checkpoints

    out = {}
    for name, kw in (("ties_only", {"threshold_ties": "argsort"}),
                     ("parity", {"threshold_ties": "argsort", "arithmetic": "mergekit"})):
        shutil.rmtree(work / f"out_{name}", ignore_errors=True)
        t0 = time.perf_counter()
        merge_checkpoints(base, fts, work / f"out_{name}",
                          MergeConfig.mergekit_ties(density=density, weights=[1.0] * len(fts), **kw))
        out[name] = time.perf_counter() - t0
    return out


@dataclass
class Row:
    kind: kinds_mod.Kind
    gib: float
    params: int
    unchanged: list[float]
    mergekit: Timing | None
    mergekit_error: str | None
    ours: list[Timing]
    ours_mk: Timing
    parity: Parity | None
    parity_s: dict[str, float]


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def run_kind(kind: kinds_mod.Kind, size: kinds_mod.Size, args: argparse.Namespace, mergekit: Path,
             env: dict[str, str]) -> Row:
    work = args.work / args.size
    base, *fts = kinds_mod.generate(work, kind, size)
    kdir = work / kind.name
    kdir.mkdir(parents=True, exist_ok=True)
    nbytes = sum(f.stat().st_size for f in base.glob("*.safetensors"))
    params = sum(math.prod(s) for s in _shapes(base).values())
    unchanged = [kinds_mod.unchanged_fraction(base, f) for f in fts]
    ours = [sys.executable, str(HERE / "ours.py"), "--method", "ties", "--base", str(base),
            "--models", *map(str, fts), "--density", str(args.density),
            "--max-working-bytes", str(args.max_working_bytes)]
    mk_settings = ["--weights", *(["1"] * len(fts)), "--mergekit-semantics"]
    for d in ("out_venus", "out_venus_mk", "out_mergekit"):
        shutil.rmtree(kdir / d, ignore_errors=True)
    # a first, untimed merge: compiles the kernels for this dtype on a fresh machine (cached on
    # disk after) and reads the inputs once, so both tools find them in the page cache
    subprocess.run([*ours, "-o", str(kdir / "out_venus")], env=env, check=True, capture_output=True)
    mk, mk_error = None, None
    if not args.skip_mergekit:
        cfg = {"merge_method": "ties", "base_model": str(base), "dtype": kind.dtype,
               "parameters": {"normalize": True, "int8_mask": False},
               "models": [{"model": str(f), "parameters": {"weight": 1.0, "density": args.density}} for f in fts]}
        (kdir / "mergekit.yml").write_text(json.dumps(cfg, indent=1))
        try:
            mk = timed([str(mergekit), str(kdir / "mergekit.yml"), str(kdir / "out_mergekit"), "--no-copy-tokenizer",
                        "--no-write-model-card", "--quiet"], env)
        except CommandFailed as exc:  # recorded: a checkpoint mergekit cannot merge is a finding too
            mk_error = str(exc.reason)
    runs = []
    for _ in range(args.runs):
        shutil.rmtree(kdir / "out_venus", ignore_errors=True)
        runs.append(timed([*ours, "-o", str(kdir / "out_venus")], env))
    ours_mk = timed([*ours, *mk_settings, "-o", str(kdir / "out_venus_mk")], env)
    parity, parity_s = None, {}
    if mk is not None and not args.no_parity:
        parity_s = parity_merges(base, fts, kdir, args.density)
        parity = attribute(kdir / "out_venus_mk", kdir / "out_ties_only", kdir / "out_parity", kdir / "out_mergekit")
    for d in ("out_venus", "out_venus_mk", "out_mergekit", "out_ties_only", "out_parity"):
        shutil.rmtree(kdir / d, ignore_errors=True)
    if not args.keep_inputs:
        shutil.rmtree(kdir, ignore_errors=True)
    return Row(kind, nbytes / 2**30, params, unchanged, mk, mk_error, runs, ours_mk, parity, parity_s)


def _shapes(d: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(f, framework="pt") as h:
            out |= {k: h.get_slice(k).get_shape() for k in h.keys()}
    return out


def report(rows: list[Row], args: argparse.Namespace, started: str, load: list[str], partial: bool = False) -> None:
    def f(x: float | None, fmt: str = ".1f") -> str:
        return "-" if x is None else format(x, fmt)

    print(f"\n{'(so far: ' + str(len(rows)) + ' kinds) ' if partial else ''}`venus merge` vs mergekit, TIES density {args.density}, 3 fine-tunes, weights 1; {os.cpu_count()} CPUs; "
          f"started {started}; load average before {' '.join(load)}, after "
          f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"ours: `venus merge --method ties --density {args.density} --max-working-bytes {args.max_working_bytes}` "
          f"(defaults otherwise), median of {args.runs} runs (RSS: the largest); mergekit: one run; inputs in the page cache")
    print("\n| kind | GiB per checkpoint | entries unchanged per fine-tune | mergekit wall / CPU / RSS | ours wall / CPU / RSS "
          "(merge itself) | wall ratio (<= 0.1) | CPU ratio | RSS ours (<= 1 GiB) / mergekit |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        wall, cpu = median([t.wall for t in r.ours]), median([t.cpu for t in r.ours])
        rss = max(t.rss_mib for t in r.ours)
        merge_s = median([t.merge_s for t in r.ours if t.merge_s is not None])
        mk = r.mergekit
        print(f"| {r.kind.name} | {r.gib:.2f} ({r.params / 1e6:.0f} M, {r.kind.dtype}) | "
              f"{', '.join(f'{u * 100:.0f} %' for u in r.unchanged)} | "
              f"{f(mk and mk.wall)} s / {f(mk and mk.cpu)} s / {f(mk and mk.rss_mib, '.0f')} MiB | "
              f"{wall:.1f} s / {cpu:.1f} s / {rss:.0f} MiB ({merge_s:.2f} s) | "
              f"{f(mk and wall / mk.wall, '.3f')} | {f(mk and cpu / mk.cpu, '.3f')} | "
              f"{rss:.0f} MiB / {f(mk and mk.rss_mib, '.0f')} MiB |")
    for r in rows:
        if r.mergekit_error:
            print(f"\n{r.kind.name}: mergekit failed: {r.mergekit_error}")
    if any(r.parity for r in rows):
        print("\nAt mergekit's settings (`--mergekit-semantics --weights 1 1 1`): elements that differ from mergekit's "
              "output, each attributed by changing one ingredient (run.py docstring); then the parity mode "
              "(arithmetic 'mergekit' + threshold ties 'argsort') against mergekit, bitwise")
        print("\n| kind | elements | ours = mergekit | differ | threshold ties | arithmetic | ties and arithmetic | "
              "unexplained | max abs diff (tensor) | parity mode = mergekit (>= 99.9 %) | parity merges |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            p = r.parity
            if p is None:
                continue
            extra = f"; tensors on one side only: {p.only_one_side}" if p.only_one_side else ""
            print(f"| {r.kind.name} | {p.elements:,} | {p.equal_pct(p.differ):.3f} % | {p.differ:,} | {p.ties:,} | "
                  f"{p.arithmetic:,} | {p.both:,} | {p.unexplained:,} | {p.max_diff:.3g} ({p.max_diff_key}) | "
                  f"{p.equal_pct(p.parity_differ):.4f} % ({p.parity_differ:,} differ){extra} | "
                  f"{', '.join(f'{k} {v:.0f} s' for k, v in r.parity_s.items())} |")
    print("\nTargets per kind:")
    for r in rows:
        wall, rss = median([t.wall for t in r.ours]), max(t.rss_mib for t in r.ours)
        mk = r.mergekit
        verdict = [f"wall {wall / mk.wall:.3f}x mergekit ({'met' if wall <= TARGET_WALL * mk.wall else 'NOT met'})"
                   if mk else f"wall: no mergekit figure ({'it failed' if r.mergekit_error else 'skipped'})",
                   f"RSS {rss:.0f} MiB ({'met' if rss <= TARGET_RSS_MIB else 'NOT met'})"]
        if r.parity:
            pct = r.parity.equal_pct(r.parity.parity_differ)
            verdict.append(f"parity {pct:.4f} % ({'met' if pct >= PARITY_TARGET else 'NOT met'}), "
                           f"{r.parity.unexplained} unexplained")
        print(f"  {r.kind.name}: " + "; ".join(verdict))
    print("\ncommand: .venv/bin/python benchmarks/merge_vs_mergekit/run.py " + " ".join(sys.argv[1:]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/venus-merge-bench"))
    ap.add_argument("--venv", type=Path, default=Path("/tmp/venus-mergekit-venv"))
    ap.add_argument("--size", choices=sorted(kinds_mod.SIZES), default="full")
    ap.add_argument("--kinds", nargs="+", default=None, help="kinds to run (default: all)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs of ours per kind (median)")
    ap.add_argument("--density", type=float, default=0.2)
    ap.add_argument("--max-working-bytes", type=int, default=1 << 30, help="ours (the `venus merge` default)")
    ap.add_argument("--skip-mergekit", action="store_true", help="time ours only (no ratios, no parity)")
    ap.add_argument("--no-parity", action="store_true", help="skip the parity merges and the attribution")
    ap.add_argument("--keep-inputs", action="store_true", help="keep each kind's generated checkpoints")
    ap.add_argument("--specialists", type=Path, default=None,
                    help="a `venus run --out DIR` directory: adds the kind pipeline-specialists (its mid-trained "
                         "base and the three specialists its merge stage merged)")
    args = ap.parse_args()
    size = kinds_mod.SIZES[args.size]
    all_kinds = kinds_mod.kinds(size) + ([kinds_mod.pipeline_kind(args.specialists)] if args.specialists else [])
    chosen = [k for k in all_kinds if args.kinds is None or k.name in args.kinds]
    unknown = set(args.kinds or ()) - {k.name for k in all_kinds}
    if unknown:
        raise SystemExit(f"unknown kinds {sorted(unknown)}; known: {[k.name for k in all_kinds]}")
    mergekit = ensure_venv(args.venv)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    started = time.strftime("%Y-%m-%d %H:%M")
    load = Path("/proc/loadavg").read_text().split()[:3]
    rows = []
    for kind in chosen:
        t0 = time.perf_counter()
        print(f"{kind.name}: {kind.description} ...", flush=True)
        rows.append(run_kind(kind, size, args, mergekit, env))
        print(f"  done in {time.perf_counter() - t0:.0f} s", flush=True)
        if len(rows) < len(chosen):  # the tables so far: a run stopped part-way keeps what it measured
            report(rows, args, started, load, partial=True)
            sys.stdout.flush()
    if not args.specialists:
        print("\nThe pipeline's own three specialists are a kind only with --specialists RUN_DIR (a finished "
              "`venus run --out RUN_DIR`): producing them takes a default run (~10 minutes on 2 cores).")
    report(rows, args, started, load)


if __name__ == "__main__":
    main()
