"""`venus checkpoint verify DIR`, `seal DIR` and `publish DIR URI`: the checks every loader runs.

Why a command: loaders of stage outputs require SHA256SUMS (`models.integrity`), so a checkpoint
brought from elsewhere (a hub download, a colleague's copy) has none; `seal` writes it after the
directory passes every other check, which is the point where its owner vouches for it. `verify`
runs the loaders' checks by hand (e.g. on a copy before a long job). `publish` puts a verified,
sealed checkpoint into the object store as an artifact (every file with its sha256 in the
artifact's manifest), which is what a spec's `model.base: s3://...` names: the jobs fetch it
(`runtime.base_model`) and refuse objects copied in by other tools, which carry no sha256.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from venus_core.cli._common import fail, out_console

checkpoint_app = typer.Typer(help="Verify checkpoint directories, or seal one brought from elsewhere.",
                             no_args_is_help=True)
DirArg = Annotated[Path, typer.Argument(help="checkpoint directory")]


@checkpoint_app.command("verify")
def verify(
    path: DirArg,
    require_manifest: Annotated[bool, typer.Option(
        "--require-manifest/--manifest-optional", help="refuse a directory without SHA256SUMS (as stage inputs are)")] = True,
) -> None:
    """Run every check a loader runs: no pickle file, SHA256SUMS matching every file, valid safetensors."""
    from venus_core.models.integrity import check_weights, verify_checkpoint_dir

    try:
        digest = verify_checkpoint_dir(path, require_manifest=require_manifest)
        tensors = check_weights(path)
    except (OSError, ValueError) as exc:
        fail(str(exc))
    out_console.print(f"{path}: ok, {tensors} tensors, manifest {digest or 'absent'}")


@checkpoint_app.command("seal")
def seal(path: DirArg) -> None:
    """Write SHA256SUMS for a checkpoint from elsewhere, after every other check passes."""
    from venus_core.models.integrity import MANIFEST, verify_checkpoint_dir, write_manifest

    try:
        if (path / MANIFEST).is_file():
            fail(f"{path}: already has {MANIFEST}; `venus checkpoint verify` checks it")
        verify_checkpoint_dir(path, require_manifest=False)
        write_manifest(path)
        digest = verify_checkpoint_dir(path, require_manifest=True)
    except (OSError, ValueError) as exc:
        fail(str(exc))
    out_console.print(f"{path}: sealed, manifest {digest}")


@checkpoint_app.command("publish")
def publish(
    path: DirArg,
    uri: Annotated[str, typer.Argument(help="where: s3://bucket/prefix or file:///dir/prefix")],
    overwrite: Annotated[bool, typer.Option(help="replace an artifact already published there")] = False,
) -> None:
    """Verify a sealed checkpoint and publish it to the object store (for model.base: s3://...)."""
    from venus_core.io.storage import ArtifactExistsError, StorageError, open_store
    from venus_core.io.storage.fetch import split_uri
    from venus_core.models.integrity import check_weights, verify_checkpoint_dir

    try:
        digest = verify_checkpoint_dir(path, require_manifest=True)
        check_weights(path)
        root, prefix = split_uri(uri)
        files = open_store(root).put_dir(path, prefix, overwrite=overwrite)
    except ArtifactExistsError as exc:
        fail(f"{exc.args[0].split('; ')[0]}; --overwrite replaces it")
    except (OSError, ValueError, StorageError) as exc:
        fail(str(exc))
    size = sum(f.size for f in files)
    out_console.print(f"{path} -> {uri}: {len(files)} files, {size / 1e9:.2f} GB, manifest {digest}")


def register(app: typer.Typer) -> None:
    app.add_typer(checkpoint_app, name="checkpoint")
