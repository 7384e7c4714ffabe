"""Materialise the data sources of an agent spec as dataset directories.

Why here: the main job, the scoring stage and mid-training all start from "the spec's sources as
datasets on disk"; one function keeps that identical everywhere. Synthetic sources are generated
(deterministic from their seed); `dataset` sources in the project's layout are read in place from a
local path (file:// or plain); sources in a public format are imported with the registered
importer (quarantine and report beside the dataset). Object-store URIs are fetched by the runtime
layer (storage) before they reach here, so this module names them in its error.
"""

from __future__ import annotations

from pathlib import Path

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
        manifest = synthesize(s.kind, s.n, s.level, s.seed, target, platform=s.platform)
        return target, manifest
    assert source.uri is not None
    path = local_path(source.uri)
    if source.format == "venus":
        return path, load_manifest(path)
    from venus_core.data.importers import run_import

    target = Path(out_root) / source.name
    run_import(source.format, path, target, overwrite=True)
    return target, load_manifest(target)
