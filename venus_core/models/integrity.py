"""Checkpoint directories are verified before anything reads them.

Why: every stage hands the next one a directory of weights, and a directory can be incomplete (a
job killed while writing it), altered (a partial copy, a hand edit) or hostile (a pickle, which
executes code when loaded; a safetensors file whose header lies about its sizes). A loader that
reads such a directory either crashes somewhere deep in torch or, worse, trains on it. So every
loader (`loading.load_model`, `train.checkpoint.load_checkpoint`, the merge job's inputs, the
serve-time weight reload, the vLLM worker) calls `verify_checkpoint_dir` first, and every
checkpoint the platform writes ends with `write_manifest`.

What is checked, in this order, each failure a `CheckpointIntegrityError` naming the file:
1. no pickle file anywhere in the tree (`PICKLE_SUFFIXES`; weights are safetensors only);
2. `SHA256SUMS` (`sha256sum -c` format, written last, so its presence marks a complete write):
   when present, every listed file exists with that sha256 and every file of the tree is listed
   (a file added after the manifest is refused too); when absent, refused if `require_manifest`;
3. every `*.safetensors` header is what the safetensors library accepts (header length within
   the file, offsets covering the data exactly, shapes matching byte sizes, known dtypes), read
   from the header only; an index (`model.safetensors.index.json`) must name existing shards
   that hold the tensors it maps to them.

Which loaders require the manifest: those of stage outputs (the next stage's inputs, training
resume, merge inputs). A checkpoint a user brings from elsewhere (the `model.base` directory, a
judge checkpoint, `venus serve --model`) may lack one; when it has one, it must match.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath

from safetensors import SafetensorError, safe_open

MANIFEST = "SHA256SUMS"
INDEX = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


class CheckpointIntegrityError(ValueError):
    """A checkpoint directory failed verification; the message names the file and what is wrong."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(root: Path) -> list[Path]:
    """Every file under `root` (symlinks included, so that one pointing elsewhere is seen)."""
    return sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink())


def refuse_pickles(root: Path) -> None:
    """CheckpointIntegrityError naming the first pickle file anywhere under `root`."""
    pickles = [p for p in _files(root) if p.suffix.lower() in PICKLE_SUFFIXES]
    if pickles:
        raise CheckpointIntegrityError(
            f"{pickles[0]}: pickle file refused (loading it can execute code); "
            "checkpoints are safetensors only")


def read_manifest(root: Path) -> dict[str, str]:
    """{relative path: sha256} of `root/SHA256SUMS`; an error names the line that is not
    `<64 hex>  <relative path>`."""
    manifest = root / MANIFEST
    listed: dict[str, str] = {}
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointIntegrityError(f"{manifest}: unreadable: {exc}") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, name = line.partition("  ")
        name = name.removeprefix("*")
        parts = PurePosixPath(name).parts
        ok = (sep and len(digest) == 64 and all(c in "0123456789abcdefABCDEF" for c in digest) and name
              and not name.startswith("/") and ".." not in parts and "\\" not in name)
        if not ok:
            raise CheckpointIntegrityError(f"{manifest}:{n}: not a '<sha256>  <file>' line: {line[:80]!r}")
        if name in listed:
            raise CheckpointIntegrityError(f"{manifest}:{n}: lists {name} twice")
        listed[name] = digest.lower()
    return listed


def verify_manifest(root: Path, *, required: bool) -> int:
    """Check `root/SHA256SUMS` (module doc, step 2); the number of files it lists (0 without one)."""
    manifest = root / MANIFEST
    if not manifest.is_file():
        if required:
            raise CheckpointIntegrityError(
                f"{root}: no {MANIFEST} manifest (a platform checkpoint writes it last, after its "
                "files): the checkpoint is incomplete or was not written by the platform; for one "
                "brought from elsewhere, `venus checkpoint seal DIR` writes it after the other checks")
        return 0
    listed = read_manifest(root)
    for name, digest in sorted(listed.items()):
        file = root / name
        if not file.is_file():
            raise CheckpointIntegrityError(f"{manifest} lists {name}, which is missing")
        if not os.path.realpath(file).startswith(os.path.realpath(root) + os.sep):
            raise CheckpointIntegrityError(f"{file}: a symlink out of the checkpoint directory")
        if sha256_file(file) != digest:
            raise CheckpointIntegrityError(f"{file}: sha256 does not match {MANIFEST} (a partial or altered copy?)")
    present = {p.relative_to(root).as_posix() for p in _files(root) if not p.name.startswith(MANIFEST)}
    unlisted = sorted(present - set(listed))
    if unlisted:
        kind = "weight file" if unlisted[0].endswith(".safetensors") else "file"
        raise CheckpointIntegrityError(f"{manifest} does not list {kind} {unlisted[0]} (added after the manifest?)")
    return len(listed)


def safetensors_keys(file: Path) -> list[str]:
    """The tensor names of one safetensors file, its header validated by the safetensors library."""
    try:
        with safe_open(str(file), framework="pt") as f:
            return list(f.keys())
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointIntegrityError(f"{file}: invalid safetensors file: {exc}") from None


def check_weights(root: Path) -> int:
    """Validate every safetensors header and the index (module doc, step 3); the tensor count."""
    files = sorted(root.glob("*.safetensors"))
    keys = {f.name: safetensors_keys(f) for f in files}
    index = root / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError("weight_map is not an object")
        except (OSError, ValueError, RecursionError, KeyError, TypeError) as exc:
            raise CheckpointIntegrityError(f"{index}: not a safetensors index: {exc}") from None
        for tensor, shard in sorted(weight_map.items()):
            if not isinstance(shard, str) or shard not in keys:
                raise CheckpointIntegrityError(f"{index}: weight_map.{tensor} names shard {shard!r}, which is not "
                                               f"a safetensors file of {root}")
            if tensor not in keys[shard]:
                raise CheckpointIntegrityError(f"{index}: weight_map.{tensor}: {shard} holds no such tensor")
    return sum(len(k) for k in keys.values())


def verify_checkpoint_dir(root: str | Path, *, require_manifest: bool = True) -> str | None:
    """All checks of the module doc, in order; the manifest's digest (`manifest_digest`)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"checkpoint directory not found: {root}")
    refuse_pickles(root)
    verify_manifest(root, required=require_manifest)
    check_weights(root)
    return manifest_digest(root)


def manifest_digest(root: Path) -> str | None:
    """`sha256:<hex>` of `root/SHA256SUMS` (it names every file's digest, so it identifies the
    checkpoint), or None without one."""
    manifest = Path(root) / MANIFEST
    return f"sha256:{sha256_file(manifest)}" if manifest.is_file() else None


def manifest_lines(root: Path) -> str:
    """A `SHA256SUMS` text for every file under `root` (what `verify_manifest` checks)."""
    files = [p for p in _files(root) if p.is_file() and not p.name.startswith(MANIFEST)]
    return "".join(f"{sha256_file(p)}  {p.relative_to(root).as_posix()}\n" for p in files)


def write_manifest(root: str | Path) -> Path:
    """Write `root/SHA256SUMS` last, after the checkpoint is complete (replaced atomically)."""
    out = Path(root) / MANIFEST
    tmp = out.with_suffix(".tmp")
    tmp.write_text(manifest_lines(Path(root)), encoding="utf-8")
    tmp.replace(out)
    return out


__all__ = ["INDEX", "MANIFEST", "PICKLE_SUFFIXES", "CheckpointIntegrityError", "check_weights",
           "manifest_digest", "manifest_lines", "read_manifest", "refuse_pickles", "safetensors_keys",
           "sha256_file", "verify_checkpoint_dir", "verify_manifest", "write_manifest"]
