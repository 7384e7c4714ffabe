from __future__ import annotations

import json
from pathlib import Path

import pytest

from venus_core.runtime.common import dir_sha256, git_revision, job_parser, load_job_spec, provenance, write_json_atomic

ROOT = Path(__file__).resolve().parents[2]


def test_parser_and_spec() -> None:
    args = job_parser("mid_train", "x").parse_args(
        ["--spec", str(ROOT / "agents/venus-tiny"), "--out", "/tmp/o", "--set", "mid_train.lr=0.5"])
    assert load_job_spec(args).mid_train.lr == 0.5
    with pytest.raises(SystemExit):
        job_parser("mid_train", "x").parse_args(["--out", "/tmp/o"])


def test_dir_sha256_tracks_content(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.txt").write_text("1")
    d1 = dir_sha256(tmp_path)
    (tmp_path / "a" / "x.txt").write_text("2")
    assert dir_sha256(tmp_path) != d1
    (tmp_path / "manifest.json").write_text("{}")
    assert dir_sha256(tmp_path).startswith("manifest:")


def test_provenance_and_atomic_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from venus_core.config import AgentSpec

    monkeypatch.setenv("VENUS_GIT_REV", "abc123")
    assert git_revision() == "abc123"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "f").write_bytes(b"x")
    prov = provenance("merge", AgentSpec(), [tmp_path / "in"])
    assert prov["git_revision"] == "abc123" and prov["inputs"][0]["sha256"] == dir_sha256(tmp_path / "in")
    out = write_json_atomic(tmp_path / "r" / "report.json", prov)
    assert json.loads(out.read_text())["job"] == "merge"
    assert [p.name for p in out.parent.iterdir()] == ["report.json"]
