"""`venus merge`: merge fine-tuned checkpoints (TIES / linear / task arithmetic) into one.

Why argparse inside a typer command: the documented form is
`venus merge --method ties --base B --models M1 M2 M3 --weights 0.5 0.3 0.2 -o OUT`, i.e.
options taking several values, which click/typer options cannot express (they would need
`--models M1 --models M2`). The command therefore takes its raw arguments from typer and parses
them with argparse (`nargs="+"`); `venus merge --help` prints argparse's help.
Heavy imports (torch) stay inside the command so that `venus --help` is fast.

The choices of the options that name a `MergeConfig` field (`--trim-scope`, `--election`,
`--zero-sign`, `--threshold-ties`, `--backend`) are that field's `Literal` values, read from the
config (`config_choices`), so that the command accepts exactly what the config does.
"""

from __future__ import annotations

import argparse
import json
import time
import typing

import typer

PARTS = ("vision", "projector", "language", "embeddings")


def config_choices(field: str) -> tuple[str, ...]:
    """The values `MergeConfig.<field>` allows: the arguments of its `Literal` annotation (the one
    member of `X | None` that is a Literal)."""
    from venus_core.merge.api import MergeConfig

    annotation = MergeConfig.model_fields[field].annotation
    for arg in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(arg) is typing.Literal:
            return tuple(str(a) for a in typing.get_args(arg))
    raise TypeError(f"MergeConfig.{field} is not a Literal field: {annotation!r}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="venus merge", description="Merge fine-tunes of one base checkpoint.")
    p.add_argument("--method", default="ties", help="ties | linear | task_arithmetic (MERGE_METHODS)")
    p.add_argument("--base", required=True, help="base checkpoint directory (safetensors)")
    p.add_argument("--models", nargs="+", required=True, help="fine-tuned checkpoint directories")
    p.add_argument("--weights", nargs="+", type=float, default=None, help="one weight per model")
    p.add_argument("--density", type=float, default=0.2, help="TIES: fraction of each task vector kept")
    p.add_argument("--lambda", dest="lambda_", type=float, default=1.0, help="scale of the merged delta")
    p.add_argument("--trim-scope", choices=config_choices("trim_scope"), default="tensor")
    p.add_argument("--election", choices=config_choices("election"), default="mass")
    p.add_argument("--zero-sign", choices=config_choices("zero_sign"), default="none")
    p.add_argument("--threshold-ties", choices=config_choices("threshold_ties"), default="index",
                   help="entries tied at the trim threshold: index (the lowest flat indices, default), keep "
                        "(all), argsort (the ones mergekit keeps; whole tensors in memory: parity only)")
    p.add_argument("--mergekit-semantics", action="store_true",
                   help="reproduce mergekit's ties (weighted_mass election, zero sign positive)")
    p.add_argument("--part-density", action="append", default=[], metavar="PART=D",
                   help=f"density for one part ({', '.join(PARTS)}); repeatable")
    p.add_argument("--copy-part", action="append", default=[], choices=PARTS,
                   help="take this part from the base unchanged; repeatable")
    p.add_argument("--max-working-bytes", type=int, default=1 << 30)
    p.add_argument("--shard-bytes", type=int, default=2 * (1 << 30))
    p.add_argument("--threads", type=int, default=None,
                   help="worker threads (default: torch's thread count, i.e. OMP_NUM_THREADS or the cores)")
    p.add_argument("--backend", choices=config_choices("backend"), default="fused",
                   help="fused numba kernels (default) or the block-wise torch reference path")
    p.add_argument("-o", "--out", required=True, help="output directory (must be empty or absent)")
    return p


def register(app: typer.Typer) -> None:
    """Add the `merge` command to a typer app."""

    @app.command(
        "merge",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )
    def merge(ctx: typer.Context) -> None:
        """Merge fine-tuned checkpoints into one (TIES, linear, task arithmetic); see --help."""
        args = _parser().parse_args(ctx.args)
        from venus_core.cli.progress import progress_bar
        from venus_core.merge import MergeConfig, merge_checkpoints

        parts: dict[str, dict[str, object]] = {p: {"copy_base": True} for p in args.copy_part}
        for item in args.part_density:
            name, _, value = item.partition("=")
            if name not in PARTS or not value:
                raise typer.BadParameter(f"--part-density {item!r}: expected PART=D with PART in {PARTS}")
            parts.setdefault(name, {})["density"] = float(value)
        election, zero_sign = args.election, args.zero_sign
        if args.mergekit_semantics:
            election, zero_sign = "weighted_mass", "positive"
        try:
            cfg = MergeConfig(
                method=args.method, weights=args.weights, density=args.density,
                **{"lambda": args.lambda_}, trim_scope=args.trim_scope, election=election,
                zero_sign=zero_sign, threshold_ties=args.threshold_ties, parts=parts,
                max_working_bytes=args.max_working_bytes, shard_bytes=args.shard_bytes,
                threads=args.threads, backend=args.backend,
            )
            t0 = time.perf_counter()
            # every input is verified as it is opened (merge.io.CheckpointReader): no pickle, SHA256SUMS
            # checked when present, safetensors headers and index validated
            with progress_bar(f"merge {args.method}", "tensors") as progress:
                report = merge_checkpoints(args.base, args.models, args.out, cfg, progress=progress)
            seconds = time.perf_counter() - t0
        except (ValueError, FileExistsError, FileNotFoundError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        summary = {p: {k: v[k] for k in ("achieved_density", "sign_conflict_rate", "unchanged_tensors")}
                   for p, v in report["parts"].items()}  # type: ignore[union-attr]
        typer.echo(json.dumps({"out": args.out, "seconds": round(seconds, 3), "parts": summary}, indent=1))
