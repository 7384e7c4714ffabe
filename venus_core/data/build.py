"""Materialise the data sources of an agent spec as dataset directories.

Why here: the main job, the scoring stage and mid-training all start from "the spec's sources as
datasets on disk"; one function keeps that identical everywhere. Synthetic sources are generated
(deterministic from their seed); `collect` sources are oracle episodes played in a live environment
(MiniWoB++ pages in headless Chromium: `venus_core.envs.miniwob_collect`), only successful episodes
kept, every attempt counted in `<name>.collect.json` beside the dataset; `dataset` sources in the project's layout are read in place from a
local path (file:// or plain); sources in a public format are imported with the registered
importer (quarantine and report beside the dataset). Object-store URIs are fetched by the runtime
layer (storage) before they reach here, so this module names them in its error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from venus_core.config.spec import DataSourceSpec
from venus_core.data.store import Manifest, load_manifest


def local_path(uri: str) -> Path:
    """`file://x` or a plain path -> Path; anything else is an error naming the URI."""
    if uri.startswith("file://"):
        return Path(uri[len("file://"):])
    if "://" in uri:
        raise ValueError(f"{uri}: only local paths and file:// URIs are read here; "
                         "fetch object-store URIs through venus_core.io.storage first")
    return Path(uri)


def build_source(source: DataSourceSpec, out_root: str | Path) -> tuple[Path, Manifest]:
    """Return (dataset directory, manifest) for one source, generating synthetic data if needed."""
    if source.kind == "synth":
        from venus_core.data.synth import synthesize

        s = source.synth
        assert s is not None  # the spec fills a default for kind=synth
        target = Path(out_root) / source.name
        manifest = synthesize(s.kind, s.n, s.level, s.seed, target, platform=s.platform, refusal_share=s.refusal_share)
        return target, manifest
    if source.kind == "collect":
        return _collect(source, Path(out_root))
    assert source.uri is not None
    path = local_path(source.uri)
    if source.format == "venus":
        return path, load_manifest(path)
    from venus_core.data.importers import run_import

    target = Path(out_root) / source.name
    run_import(source.format, path, target, overwrite=True)
    return target, load_manifest(target)


def collect_report_path(out_root: str | Path, name: str) -> Path:
    """Where `build_source` writes a collect source's attempt counts (beside its dataset)."""
    return Path(out_root) / f"{name}.collect.json"


def read_collect_report(out_root: str | Path, name: str) -> dict[str, Any]:
    return dict(json.loads(collect_report_path(out_root, name).read_text(encoding="utf-8")))


def _collect(source: DataSourceSpec, out_root: Path) -> tuple[Path, Manifest]:
    """Play the source's oracle episodes; a task the oracle solved on no page is an error naming it
    (its share of the mixture would be silently empty), a browser that cannot start names the source."""
    from venus_core.envs.base import EnvError
    from venus_core.envs.miniwob_collect import collect

    c = source.collect
    assert c is not None  # the spec requires it for kind=collect
    target = out_root / source.name
    try:
        report = collect(c.tasks, c.n, target, seed=c.seed, overwrite=True, workers=c.workers)
    except (EnvError, OSError) as exc:
        raise RuntimeError(f"source {source.name!r} (kind=collect, env {c.env}): {exc}") from exc
    except ValueError as exc:  # an unknown task: named before any browser starts
        raise ValueError(f"source {source.name!r}: {exc}") from None
    info = {"source": source.name, "settings": c.model_dump(mode="json"), **report.to_dict()}
    out_root.mkdir(parents=True, exist_ok=True)
    collect_report_path(out_root, source.name).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    empty = [t for t in c.tasks if not report.succeeded.get(t)]
    if empty:
        first = "; ".join(str(f) for f in report.failures[:3])
        raise RuntimeError(f"source {source.name!r}: the {c.env} oracle succeeded on no page of {empty} "
                           f"({c.n} attempted each; first failures: {first})")
    return target, load_manifest(target)
