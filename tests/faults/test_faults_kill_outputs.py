"""A merge or an evaluation killed outright (SIGKILL, no cleanup handler runs) leaves nothing that a
later stage would take for a result (issue 22 §2, last item).

What a later stage reads: the merged checkpoint (`OUT/model`, loaded by the evaluation, which requires
its SHA256SUMS, written last) and the job's report (`OUT/report.json`, written atomically last);
the evaluation's `summary.json`, `report.html`, `comparison.json` and `provenance.json`, written
after every result. The jobs run as children and are killed at points found by watching their
output directories (never by sleeping)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from faults_helpers import TINY_SPEC, alive, job_argv, sigkill_when
from safetensors.torch import save_file

from venus_core.models.integrity import CheckpointIntegrityError, verify_checkpoint_dir, write_manifest

SHAPES = {f"model.language_model.layers.{i}.mlp.up_proj.weight": (1024, 1024) for i in range(6)} | {
    "model.visual.blocks.0.attn.qkv.weight": (512, 256)}


def _ckpt(path: Path, seed: int, base: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if base is None:
        t = {k: torch.randn(s, generator=g) for k, s in SHAPES.items()}
    else:
        t = {k: v + (0 if "visual" in k else torch.randn(v.shape, generator=g) * 0.1) for k, v in base.items()}
    path.mkdir(parents=True)
    save_file(t, str(path / "model.safetensors"))
    (path / "config.json").write_text('{"model_type": "qwen3_vl"}')
    (path / "tokenizer.json").write_text('{"v": 1}')
    write_manifest(path)
    return t


@pytest.fixture(scope="module")
def specialists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("merge_inputs")
    base = _ckpt(root / "base", 0)
    for i, name in enumerate(("grounding", "mobile", "web")):
        _ckpt(root / name, i + 1, base)
    return root


def _merge_argv(inputs: Path, out: Path) -> list[str]:
    return job_argv("venus_core.runtime.merge", [
        "--spec", str(TINY_SPEC), "--set", "merge.method=ties", "--set", "platform.tracking_uri=none",
        "--base", str(inputs / "base"), "--out", str(out), "--candidates",
        *[a for n in ("grounding", "mobile", "web") for a in ("--model", f"{n}={inputs / n}")]])


MERGE_POINTS = {
    "model directory created": lambda out: (out / "model").is_dir(),
    "first merged shard on disk": lambda out: any((out / "model").glob("*.safetensors")),
    "published model done, a candidate being written": lambda out: (out / "candidates").is_dir(),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", list(MERGE_POINTS))
def test_a_merge_killed_outright_leaves_no_result(point: str, specialists: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    sigkill_when(_merge_argv(specialists, out), lambda: MERGE_POINTS[point](out), point, 120, poll=0.005)
    assert not (out / "report.json").exists()  # the job's result is written last
    model = out / "model"
    if not (model / "SHA256SUMS").exists():  # a torn model: every reader of stage outputs refuses it
        with pytest.raises(CheckpointIntegrityError):
            verify_checkpoint_dir(model, require_manifest=True)
        from venus_core.config.spec import ModelSpec
        from venus_core.models.loading import load_model

        with pytest.raises((CheckpointIntegrityError, FileNotFoundError)):  # torn before or after config.json
            load_model(model, ModelSpec())
    else:  # published before the kill: then it is whole and verifies
        verify_checkpoint_dir(model, require_manifest=True)
    print(f"\nmerge killed at {point!r}: on disk {sorted(str(p.relative_to(out)) for p in out.rglob('*'))}")
    for cand in (out / "candidates").glob("*"):
        if not (cand / "SHA256SUMS").exists():
            with pytest.raises(CheckpointIntegrityError):
                verify_checkpoint_dir(cand, require_manifest=True)


EVAL_RESULTS = ("summary.json", "report.html", "comparison.json", "provenance.json")


@pytest.mark.slow
def test_an_evaluation_killed_after_its_first_result_leaves_no_summary_or_report(
        tiny_dir: Path, domain_data: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "eval"
    argv = job_argv("venus_core.runtime.evaluate", [
        "--spec", str(TINY_SPEC), "--set", "platform.tracking_uri=none", "--model", f"a={tiny_dir}",
        "--model", f"b={tiny_dir}", "--data", str(domain_data["grounding"]), "--data", str(domain_data["mobile"]),
        "--limit", "3", "--device", "cpu", "--out", str(out)])
    children = sigkill_when(argv, lambda: len(list((out / "results").glob("*.json"))) >= 1, "the first result file",
                            240, poll=0.005)
    # venus-tiny's eval.workers: 2 spawned workers; a killed stage must not leave them waiting forever
    assert len(children) >= 2 and alive(children, 15) == []
    written = sorted(p.name for p in (out / "results").glob("*.json"))
    assert 1 <= len(written) < 4  # killed part way: 2 models x 2 suites
    assert [n for n in EVAL_RESULTS if (out / n).exists()] == []
    print(f"\nevaluation killed with {len(written)} of 4 results written; none of {EVAL_RESULTS} present")
