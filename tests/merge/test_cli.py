from __future__ import annotations

import json
from pathlib import Path

import torch
import typer
from typer.testing import CliRunner

from merge_helpers import load_dir
from venus_core.cli.merge_cmd import register


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.command()
    def other() -> None:  # a second command so typer keeps sub-command names
        """Unrelated."""

    return app


def test_cli_merges_with_multi_value_options(three_models, tmp_path: Path) -> None:
    bp, mps, base, _ = three_models
    out = tmp_path / "out"
    res = CliRunner().invoke(_app(), [
        "merge", "--method", "ties", "--base", str(bp), "--models", *map(str, mps),
        "--weights", "0.5", "0.3", "0.2", "--density", "0.5", "--lambda", "1.0",
        "--part-density", "language=0.3", "--copy-part", "vision", "-o", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert set(summary["parts"]) == {"vision", "projector", "language", "embeddings"}
    report = json.loads((out / "merge_report.json").read_text())
    assert report["config"]["weights"] == [0.5, 0.3, 0.2]
    assert report["parts"]["language"]["density"] == 0.3
    assert report["parts"]["vision"]["policy"] == "copy_base"
    got = load_dir(out)
    assert torch.equal(got["model.visual.blocks.0.attn.qkv.weight"], base["model.visual.blocks.0.attn.qkv.weight"])


def test_cli_reports_bad_input(three_models, tmp_path: Path) -> None:
    bp, mps, _, _ = three_models
    res = CliRunner().invoke(_app(), ["merge", "--method", "linear", "--base", str(bp), "--models",
                                      *map(str, mps), "--weights", "0.5", "0.5", "0.5", "-o", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "summing to 1" in res.output
    res = CliRunner().invoke(_app(), ["merge", "--method", "nope", "--base", str(bp), "--models",
                                      str(mps[0]), "-o", str(tmp_path / "o2")])
    assert res.exit_code == 2 and "unknown merge_methods 'nope'" in res.output


def test_cli_help() -> None:
    res = CliRunner().invoke(_app(), ["merge", "--help"])
    assert res.exit_code == 0 and "--models" in res.output and "--density" in res.output


def test_cli_threshold_ties_choices_are_the_configs(three_models, tmp_path: Path) -> None:
    """`--threshold-ties` accepts exactly what MergeConfig.threshold_ties allows (its Literal), and each
    value reaches the config: the command's output equals the Python API's at that setting."""
    import typing

    import pytest
    from pydantic import ValidationError

    from venus_core.cli.merge_cmd import _parser, config_choices
    from venus_core.merge import MergeConfig, merge_checkpoints

    allowed = typing.get_args(MergeConfig.model_fields["threshold_ties"].annotation)
    assert set(allowed) == {"index", "keep", "argsort"}  # "argsort": the parity mode, missing from the CLI before
    ties_action = next(a for a in _parser()._actions if "--threshold-ties" in a.option_strings)
    assert tuple(ties_action.choices) == allowed == config_choices("threshold_ties")
    with pytest.raises(ValidationError):
        MergeConfig(threshold_ties="bogus")
    bp, mps, _, _ = three_models
    for ties in allowed:
        out = tmp_path / f"cli-{ties}"
        res = CliRunner().invoke(_app(), ["merge", "--base", str(bp), "--models", *map(str, mps), "--density", "0.3",
                                          "--threshold-ties", ties, "-o", str(out)])
        assert res.exit_code == 0, res.output
        assert json.loads((out / "merge_report.json").read_text())["config"]["threshold_ties"] == ties
        api = tmp_path / f"api-{ties}"
        merge_checkpoints(bp, mps, api, MergeConfig(density=0.3, threshold_ties=ties))
        assert (out / "SHA256SUMS").read_text().replace(str(out), "") == (api / "SHA256SUMS").read_text().replace(str(api), "")
    res = CliRunner().invoke(_app(), ["merge", "--base", str(bp), "--models", *map(str, mps),
                                      "--threshold-ties", "bogus", "-o", str(tmp_path / "bad")])
    assert res.exit_code != 0 and not (tmp_path / "bad").exists()
    for field in ("trim_scope", "election", "zero_sign", "backend"):  # the other Literal options too
        flag = "--" + field.replace("_", "-")
        action = next(a for a in _parser()._actions if flag in a.option_strings)
        assert tuple(action.choices) == typing.get_args(MergeConfig.model_fields[field].annotation)


def test_progress_counts_every_output_tensor_once(three_models, tmp_path: Path) -> None:
    from venus_core.merge import MergeConfig, merge_checkpoints

    bp, mps, _, _ = three_models
    calls: list[tuple[int, int | None]] = []
    report = merge_checkpoints(bp, mps, tmp_path / "out", MergeConfig(method="ties", weights=[0.5, 0.3, 0.2]),
                               progress=lambda d, t: calls.append((d, t)))
    n = len(report["tensors"])  # type: ignore[arg-type]
    assert n > 1 and calls == [(k, n) for k in range(1, n + 1)]
