"""`venus data score | clean | mix`: the data stage's pieces from the shell.

Why thin: the work lives in `venus_core.scoring` (judges, policy), `venus_core.data.clean` and
`venus_core.data.mix`, which the runtime job `score_data` runs in sequence; these commands run one
piece at a time on dataset directories, print a summary (or `--json`) and exit 1 when the input
cannot be processed. `register(data_app)` adds the three commands to `venus data`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from venus_core.cli._common import SET_HELP, fail, out_console
from venus_core.cli.progress import progress_bar

SpecOpt = Annotated[Path | None, typer.Option("--spec", help="agent spec (default: the built-in defaults)")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help=SET_HELP)]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the report as JSON")]


def _spec(spec: Path | None, overrides: list[str] | None):  # type: ignore[no-untyped-def]
    from venus_core.config import AgentSpec, load_spec
    from venus_core.config.loader import apply_overrides, spec_from_dict, spec_to_dict

    try:
        if spec is not None:
            return load_spec(spec, overrides or [])
        return spec_from_dict(apply_overrides(spec_to_dict(AgentSpec()), overrides or []), where="--set")
    except (ValueError, OSError) as exc:
        fail(str(exc))


def score_cmd(
    src: Annotated[Path, typer.Argument(help="dataset directory to score")],
    out: Annotated[
        Path,
        typer.Option(
            "--out", "-o", help="output directory (dataset/, report.json, decisions.jsonl, histogram.png)"
        ),
    ],
    spec: SpecOpt = None,
    overrides: SetOpt = None,
    cache: Annotated[
        Path | None, typer.Option("--cache", help="judgement cache file (default OUT/judge_cache.sqlite)")
    ] = None,
    max_failure_share: Annotated[
        float,
        typer.Option(min=0, max=1, help="fail when more than this share of the records cannot be judged"),
    ] = 0.05,
    as_json: JsonOpt = False,
) -> None:
    """Judge every record of SRC and apply keep (>=7) / rewrite (4-6) / rebuild-or-discard (0-3);
    print the decisions, bucket counts, the high-fidelity share before -> after and the judge's cost."""
    from venus_core.scoring.judges import make_judge
    from venus_core.scoring.policy import DatasetImages, score_dataset

    agent = _spec(spec, overrides)
    try:
        images = DatasetImages()
        judge = make_judge(agent.scoring, open_image=images, cache_path=cache or out / "judge_cache.sqlite")
        try:
            with progress_bar(f"score {src.name}", "records") as progress:
                report = score_dataset(src, out, agent.scoring, judge, progress=progress, images=images,
                                       max_failure_share=max_failure_share)
        finally:
            judge.close()
    except (ValueError, RuntimeError, OSError) as exc:
        fail(str(exc), code=1)
    data = report.to_dict()
    (out / "report.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    out_console.print(report.table(), markup=False, highlight=False)
    out_console.print(f"decisions in {out / 'decisions.jsonl'}", markup=False, highlight=False)


def clean_cmd(
    src: Annotated[Path, typer.Argument(help="dataset directory to clean")],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="output directory (dataset/, clean_report.json, dropped.jsonl)"),
    ],
    step: Annotated[
        list[str] | None, typer.Option("--step", help="run only these steps (repeatable, in this order)")
    ] = None,
    scroll: Annotated[
        list[str] | None, typer.Option("--scroll-semantics", help="SOURCE=finger|content|auto (repeatable)")
    ] = None,
    target_share: Annotated[
        float, typer.Option("--resample-target-share", min=0, max=1, help="rare-action target share")
    ] = 0.05,
    as_json: JsonOpt = False,
) -> None:
    """Apply the UI-Venus-1.0 cleaning rules to SRC; report before/after counts per step."""
    from pydantic import ValidationError

    from venus_core.data.clean import DEFAULT_ORDER, CleanOptions, clean_dataset

    semantics: dict[str, str] = {}
    for item in scroll or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--scroll-semantics {item!r}: expected SOURCE=finger|content|auto")
        semantics[key] = value
    try:
        options = CleanOptions(
            steps=list(step or DEFAULT_ORDER),
            scroll_semantics=semantics,  # type: ignore[arg-type]
            resample_target_share=target_share,
        )
        report = clean_dataset(src, out, options)
    except ValidationError as exc:
        fail(f"invalid cleaning options: {exc}")
    except (ValueError, OSError) as exc:
        fail(str(exc), code=1)
    if as_json:
        typer.echo(json.dumps(report, indent=2, ensure_ascii=False))
        return
    out_console.print(
        f"{src}: read {report['read']}, dropped {report['dropped']}, added {report['added']} -> {report['written']}"
    )
    for s in report["steps"]:
        reasons = ", ".join(f"{k}={v}" for k, v in s["dropped_by_reason"].items())
        out_console.print(
            f"  {s['step']:<28} {s['before']:>6} -> {s['after']:<6} changed {s['changed']:<5}"
            f" added {s['added']:<5}{'  dropped: ' + reasons if reasons else ''}"
        )


def mix_cmd(
    inputs: Annotated[list[Path], typer.Argument(help="scored dataset directories (one source each)")],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="output directory (train/, validation/, mix_manifest.json)")
    ],
    spec: SpecOpt = None,
    overrides: SetOpt = None,
    total: Annotated[int | None, typer.Option("--total", min=1, help="at most this many records")] = None,
    max_distance: Annotated[
        int, typer.Option("--max-distance", min=0, max=64, help="dHash bits for near-duplicates")
    ] = 4,
    as_json: JsonOpt = False,
) -> None:
    """Build the mid-training corpus: domain ratios (data.mixture), dedup, split by episode."""
    from venus_core.data.mix import build_mixture

    agent = _spec(spec, overrides)
    names = [p.name for p in inputs]
    weights = {s.name: s.weight for s in agent.data.sources if s.name in names}
    try:
        manifest = build_mixture(
            inputs,
            out,
            agent.data.mixture,
            names=names,
            weights=weights,
            total=total,
            validation_fraction=agent.data.validation_fraction,
            seed=agent.data.seed,
            max_distance=max_distance,
        )
    except (ValueError, OSError) as exc:
        fail(str(exc), code=1)
    if as_json:
        typer.echo(json.dumps(manifest, indent=2, ensure_ascii=False))
        return
    sel = ", ".join(f"{d}={n}" for d, n in manifest["selected_by_domain"].items())
    out_console.print(
        f"selected {sel}; near-duplicates removed: {manifest['near_duplicates_removed']['total']}"
    )
    for split in ("train", "validation"):
        s = manifest["splits"][split]
        out_console.print(
            f"  {split:<10} {s['records']} records, {s['episodes']} episodes, by source {s['by_source']}"
        )


def register(data_app: typer.Typer) -> None:
    """Add `score`, `clean` and `mix` to the `venus data` command group."""
    data_app.command("score")(score_cmd)
    data_app.command("clean")(clean_cmd)
    data_app.command("mix")(mix_cmd)
