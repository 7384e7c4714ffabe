"""What every runtime job shares: its command line, the resolved spec, provenance, atomic JSON.

A runtime job is a container entry point (`python -m venus_core.runtime.<job>`); the component of
the same name calls it. Every output records its inputs (URI + sha256), the resolved spec (and its
hash) and the git revision (docs/architecture.md, rule 8), so any checkpoint can be traced back.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from venus_core import __version__
from venus_core.config import AgentSpec, load_spec, spec_hash, spec_to_dict


def job_parser(job: str, description: str) -> argparse.ArgumentParser:
    """Arguments every job takes: --spec, --set (repeatable), --out."""
    p = argparse.ArgumentParser(prog=f"python -m venus_core.runtime.{job}", description=description)
    p.add_argument("--spec", required=True, help="agent spec file or directory")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec field (repeatable)")
    p.add_argument("--out", required=True, help="output directory")
    return p


def load_job_spec(args: argparse.Namespace) -> AgentSpec:
    return load_spec(args.spec, args.overrides)


def git_revision() -> str:
    """The source revision: $VENUS_GIT_REV (baked into images), else `git rev-parse`, else 'unknown'."""
    env = os.environ.get("VENUS_GIT_REV")
    if env:
        return env
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    rev = out.stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                           capture_output=True, text=True, timeout=5).stdout.strip()
    return rev + ("-dirty" if dirty else "")


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def dir_sha256(path: str | Path) -> str:
    """Digest of a directory tree: sha256 over the sorted (relative path, file sha256) pairs.

    A dataset directory is identified by its manifest alone (the manifest holds every shard's
    sha256 and is written last), which keeps provenance cheap for large image stores.
    """
    root = Path(path)
    if root.is_file():
        return file_sha256(root)
    manifest = root / "manifest.json"
    if manifest.is_file():
        return "manifest:" + file_sha256(manifest)
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + file_sha256(f).encode() + b"\n")
    return h.hexdigest()


def provenance(job: str, spec: AgentSpec, inputs: Sequence[str | Path]) -> dict[str, Any]:
    return {
        "job": job,
        "venus_version": __version__,
        "git_revision": git_revision(),
        "spec_sha256": spec_hash(spec),
        "spec": spec_to_dict(spec),
        "inputs": [{"uri": str(p), "sha256": dir_sha256(p)} for p in inputs],
    }


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    """Write JSON to a temp file in the same directory, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
