"""The progress bar of the long commands (venus_core/cli/progress.py): drawn on a terminal, absent elsewhere."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from venus_core.cli import app
from venus_core.cli import progress as cli_progress
from venus_core.cli.progress import progress_bar
from venus_core.train.tracker import MemoryTracker, ProgressTracker

ROOT = Path(__file__).resolve().parents[1]


def _terminal() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=120, color_system=None), buf


def test_bar_on_a_terminal_shows_description_counts_unit_and_eta() -> None:
    console, buf = _terminal()
    with progress_bar("import screenspot-v2", "records", console=console) as progress:
        assert progress is not None
        for k in range(1, 6):
            progress(k, 5)
    text = buf.getvalue()
    assert "import screenspot-v2" in text and "5/5 records" in text and "ETA" in text


def test_bar_without_a_total_counts_and_leaves_the_eta_out() -> None:
    console, buf = _terminal()
    with progress_bar("import x", "records", console=console) as progress:
        assert progress is not None
        progress(3, None)
    text = buf.getvalue()
    assert "3/? records" in text and "ETA" not in text


def test_no_bar_off_a_terminal() -> None:
    buf = io.StringIO()
    with progress_bar("x", "records", console=Console(file=buf, width=120)) as progress:
        assert progress is None
    assert buf.getvalue() == ""
    with pytest.raises(ValueError, match="unit"), progress_bar("x", " "):
        pass


def test_progress_tracker_forwards_and_reports_the_highest_step() -> None:
    inner, calls = MemoryTracker(), []
    tracker = ProgressTracker(inner, lambda d, t: calls.append((d, t)), 30)
    tracker.log_params({"a": 1})
    for step in (10, 20, 20, 30):  # the eval at step 20 logs the same step again
        tracker.log_metrics({"train/loss": 1.0}, step)
    tracker.log_artifact("x.json")
    assert calls == [(10, 30), (20, 30), (30, 30)]
    assert inner.params == {"a": 1} and [s for s, _ in inner.metrics] == [10, 20, 20, 30]
    assert inner.artifacts == [("x.json", None)]
    with pytest.raises(ValueError, match="total"):
        ProgressTracker(inner, lambda d, t: None, -1)


def test_synth_draws_the_bar_on_stderr_only_when_it_is_a_terminal(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    plain = CliRunner().invoke(app, ["data", "synth", "--kind", "grounding", "-n", "6", "-o", str(tmp_path / "a")])
    assert plain.exit_code == 0, plain.output
    assert plain.output.startswith("wrote ") and plain.output.count("\n") == 1  # the summary line, nothing else
    console, buf = _terminal()
    monkeypatch.setattr(cli_progress, "err_console", console)
    shown = CliRunner().invoke(app, ["data", "synth", "--kind", "grounding", "-n", "6", "-o", str(tmp_path / "b")])
    assert shown.exit_code == 0, shown.output
    assert "synth grounding level 0" in buf.getvalue() and "6/6 records" in buf.getvalue()
    def summary(out: str, where: Path) -> str:  # the line without its directory and its seconds
        return re.sub(r"\d+\.\ds\b", "<s>", out.replace(str(where), ""))

    assert summary(shown.output, tmp_path / "b") == summary(plain.output, tmp_path / "a")  # 0.0s vs 0.1s under load


@pytest.mark.slow
def test_bootstrap_bar_counts_the_steps_of_all_stages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from venus_core.train.bootstrap import DEFAULT_STAGES

    calls: list[tuple[int, int | None]] = []
    real = ProgressTracker

    def recording(inner, progress, total):  # type: ignore[no-untyped-def]
        def both(done: int, planned: int | None) -> None:
            calls.append((done, planned))
            progress(done, planned)
        return real(inner, both, total)

    console, buf = _terminal()
    monkeypatch.setattr(cli_progress, "err_console", console)
    monkeypatch.setattr("venus_core.train.tracker.ProgressTracker", recording)
    steps = ",".join(["2"] + ["0"] * (len(DEFAULT_STAGES) - 1))
    out = tmp_path / "boot"
    res = CliRunner().invoke(app, ["bootstrap", "--out", str(out), "--spec", str(ROOT / "agents" / "venus-tiny"),
                                   "--scale", "0.001", "--steps", steps, "--eval-limit", "1"])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "bootstrap_report.json").read_text())
    assert calls and calls[-1] == (2, 2) == (sum(s["steps"] for s in report["stages"]),) * 2
    assert "2/2 steps" in buf.getvalue() and "2/2" not in res.output
