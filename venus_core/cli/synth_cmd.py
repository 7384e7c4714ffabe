"""`venus data synth`: generate datasets from the synthetic GUI world."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from venus_core.cli._common import fail, out_console
from venus_core.cli.progress import progress_bar

def _levels_help() -> str:
    from venus_core.data.synth import LEVELS

    return "curriculum level: " + "; ".join(f"{k} = {v}" for k, v in sorted(LEVELS.items()))

def synth(
    kind: Annotated[str, typer.Option("--kind", help="grounding | navigation | vqa | mixture")] = "mixture",
    n: Annotated[int, typer.Option("-n", min=1, help="number of records")] = 1000,
    level: Annotated[int, typer.Option("--level", min=0, help="curriculum level (see `venus data levels`)")] = 0,
    seed: Annotated[int, typer.Option("--seed", help="seed: the same seed gives a byte-identical dataset")] = 0,
    platform: Annotated[str, typer.Option(help="mobile | web | both")] = "both",
    output: Annotated[Path, typer.Option("-o", "--output", help="dataset directory to create")] = Path("synth-data"),
) -> None:
    """Generate a dataset (grounding, navigation, VQA or the mid-training mixture) from the synthetic world."""
    import time

    from venus_core.data.synth import LEVELS, synthesize

    if kind not in ("grounding", "navigation", "vqa", "mixture"):
        fail(f"--kind {kind!r}: expected grounding, navigation, vqa or mixture")
    if platform not in ("mobile", "web", "both"):
        fail(f"--platform {platform!r}: expected mobile, web or both")
    if level not in LEVELS:
        fail(f"--level {level}: known levels are {sorted(LEVELS)}")
    t0 = time.perf_counter()
    try:
        with progress_bar(f"synth {kind} level {level}", "records") as progress:
            manifest = synthesize(kind, n, level, seed, output, platform=platform,  # type: ignore[arg-type]
                                  progress=progress)
    except (FileExistsError, ValueError) as exc:
        fail(str(exc))
    dt = time.perf_counter() - t0
    doms = ", ".join(f"{k} {v}" for k, v in sorted(manifest.counts_by_domain.items()))
    out_console.print(f"wrote {output}: {manifest.records} records ({doms}), {manifest.images} images, {dt:.1f}s")

def levels() -> None:
    """List the curriculum levels of the synthetic world."""
    from venus_core.data.synth import LEVELS

    for k, v in sorted(LEVELS.items()):
        out_console.print(f"{k}: {v}")

def register(data_app: typer.Typer) -> None:
    data_app.command("synth")(synth)
    data_app.command("levels")(levels)
