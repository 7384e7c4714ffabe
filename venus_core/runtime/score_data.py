"""Runtime job: data scoring — validate -> clean -> score -> policy -> mix.

    python -m venus_core.runtime.score_data --spec AGENT [--data DIR ...] --out DIR [--set k=v ...]

Without --data the spec's data sources are materialised first (synthetic sources generated into
OUT/sources/<name>, local `venus` datasets read in place); with --data each directory is one source
named after the directory. Writes the stage layout of `venus_core.scoring.stage` under OUT plus
OUT/report.json (provenance, per-source cleaning and scoring reports, the bucket table, the
mixture summary) and prints the bucket table. Exit status 1 on a dataset that fails validation
or a judge that fails on too many samples.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from venus_core.runtime.common import job_parser, load_job_spec, provenance, write_json_atomic


def main(argv: Sequence[str] | None = None) -> int:
    p = job_parser("score_data", "Data scoring: validate, clean, judge, keep/rewrite/rebuild/discard, mix")
    p.add_argument(
        "--data",
        action="append",
        default=[],
        help="Venus dataset directory (repeatable); default: the spec's data sources",
    )
    p.add_argument(
        "--clean-steps",
        default=None,
        help="comma-separated cleaning steps to run (default: all, in the standard order; '' for none)",
    )
    args = p.parse_args(argv)
    spec = load_job_spec(args)

    from venus_core.data.build import build_source
    from venus_core.data.clean import CleanOptions
    from venus_core.scoring.stage import run_data_stage

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.data:
        inputs = [(Path(d).name, Path(d)) for d in args.data]
    else:
        inputs = [(s.name, build_source(s, out / "sources")[0]) for s in spec.data.sources]
    clean = (
        CleanOptions()
        if args.clean_steps is None
        else CleanOptions(steps=[s.strip() for s in args.clean_steps.split(",") if s.strip()])
    )
    try:
        judge_options = {"tiny_dir": out / "judge_model"} if spec.scoring.judge == "local" else {}
        summary = run_data_stage(spec, inputs, out, clean=clean, log=lambda m: print(m, flush=True),
                                 judge_options=judge_options)
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        print(f"score_data: error: {exc}", file=sys.stderr)
        return 1
    write_json_atomic(
        out / "report.json",
        {
            **provenance("score_data", spec, [p for _, p in inputs]),
            **summary,
            "wall_s": round(time.perf_counter() - t0, 1),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
