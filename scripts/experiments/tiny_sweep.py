"""Which tiny configuration learns best per CPU-minute? (training-stack issue, §6; docs/learning.md)

Each configuration runs the first two curriculum stages of `venus bootstrap` from random init —
level-0 grounding with coarse targets (4 x 4 grid), then exact targets — on the SAME synthesised
data (seed 1000), and reports the held-out level-0 hit rate after each stage, the training
CPU-seconds, and hits per CPU-minute. Level 0 is the one skill every configuration can reach in a
few CPU-minutes; leaving the coarse plateau is stochastic, so each configuration runs with
`--seeds` init seeds.

    OMP_NUM_THREADS=1 python scripts/experiments/tiny_sweep.py --work /tmp/sweep [--jobs 2] \
        [--steps 500,200] [--seeds 0] [--only A,B]

Runs `--jobs` configurations at once (one thread each) and prints a Markdown table at the end
(also written to WORK/sweep.md and WORK/sweep.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENUS = [str(Path(sys.executable).with_name("venus"))]

CONFIGS: dict[str, dict[str, int]] = {
    "A default (text 128x2, vision 64x2, patch 16, 128 px)": {},
    "B text wider (256, head_dim 64, MLP 512)": {"hidden_size": 256, "head_dim": 64, "intermediate_size": 512},
    "C text deeper (4 layers)": {"num_layers": 4},
    "D vision wider (128)": {"vision_hidden_size": 128},
    "E screen 192 px (36 visual tokens)": {"image_size": 192},
    "F patch 8 (64 visual tokens)": {"patch_size": 8},
    "G text narrower (64, head_dim 16, MLP 128)": {"hidden_size": 64, "head_dim": 16, "intermediate_size": 128},
}


def run_one(label: str, overrides: dict[str, int], seed: int, steps: str, work: Path, data: Path) -> dict[str, object]:
    key = label.split()[0] + f"-s{seed}"
    wdir = work / key
    out = work / f"{key}.model"
    if (out / "bootstrap_report.json").is_file():
        report = json.loads((out / "bootstrap_report.json").read_text())
    else:
        wdir.mkdir(parents=True, exist_ok=True)
        link = wdir / data.name
        if not link.exists():
            link.symlink_to(data)
        sets = [f"model.tiny.{k}={v}" for k, v in overrides.items()] + [f"model.tiny.seed={seed}"]
        cmd = [*VENUS, "bootstrap", "-o", str(out), "--work", str(wdir), "--steps", f"{steps},0,0,0", "--eval-limit", "128"]
        for s in sets:
            cmd += ["--set", s]
        t0 = time.time()
        with open(work / f"{key}.log", "w") as log:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=os.environ | {"OMP_NUM_THREADS": "1"}).returncode
        if rc != 0:
            return {"config": label, "seed": seed, "error": f"exit {rc}, see {work / (key + '.log')}"}
        report = json.loads((out / "bootstrap_report.json").read_text())
        report["sweep_wall_s"] = round(time.time() - t0, 1)
    from safetensors.torch import load_file

    params = sum(t.numel() for t in load_file(str(out / "model.safetensors")).values())
    st = report["stages"]
    hits = [s["held_out"].get("grounding/hit", {}) for s in st]
    cpu = sum(s["train_cpu_s"] for s in st)
    final = hits[-1]
    return {"config": label, "seed": seed, "params": params, "train_cpu_s": round(cpu, 1),
            "coarse_hit": hits[0], "exact_hit": final,
            "hits_per_cpu_min": round(final["value"] * 100 / (cpu / 60), 2) if final else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--steps", default="500,200", help="coarse,exact optimizer steps")
    ap.add_argument("--seeds", default="0", help="comma-separated model.tiny.seed values")
    ap.add_argument("--only", default="", help="comma-separated config letters (default: all)")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    data = a.work / "level0-grounding-2000"
    if not (data / "manifest.json").is_file():
        subprocess.run([*VENUS, "data", "synth", "--kind", "grounding", "-n", "2000", "--level", "0", "--seed", "1000",
                        "--platform", "both", "--output", str(data)], cwd=ROOT, check=True)
    letters = {x.strip() for x in a.only.split(",") if x.strip()}
    jobs = [(label, ov, int(s)) for label, ov in CONFIGS.items() if not letters or label[0] in letters
            for s in a.seeds.split(",")]
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        rows = list(pool.map(lambda j: run_one(j[0], j[1], j[2], a.steps, a.work, data), jobs))
    lines = ["| configuration | seed | parameters | train CPU-s | L0 hits after coarse | after exact | hit-% per CPU-min |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['config']} | {r['seed']} | error: {r['error']} | | | | |")
            continue
        c, e = r["coarse_hit"], r["exact_hit"]
        fmt = lambda h: f"{h['k']}/{h['n']} = {h['value']:.1%} [{h['ci95_low']:.1%}, {h['ci95_high']:.1%}]"  # noqa: E731
        lines.append(f"| {r['config']} | {r['seed']} | {r['params']:,} | {r['train_cpu_s']:.0f} | {fmt(c)} | {fmt(e)} | {r['hits_per_cpu_min']} |")
    table = "\n".join(lines)
    print(table)
    (a.work / "sweep.md").write_text(table + "\n")
    (a.work / "sweep.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
