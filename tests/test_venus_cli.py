"""The `venus` command: every command has --help, and the spec / agent / run commands work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.main import get_command
from typer.testing import CliRunner

from venus_core.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _all_commands(cmd: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path]
    if hasattr(cmd, "commands"):  # a group (typer vendors its own click)
        for name, sub in cmd.commands.items():
            out += _all_commands(sub, path + (name,))
    return out


COMMANDS = _all_commands(get_command(app))


def test_expected_commands_exist() -> None:
    names = {" ".join(c) for c in COMMANDS}
    assert {"spec validate", "spec show", "spec template", "new-agent", "data synth",
            "data validate", "data levels", "data import", "run", "merge", "version"} <= names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "venus")
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    result = invoke(*path, "--help")
    assert result.exit_code == 0
    assert "usage:" in result.output.lower() and len(result.output.splitlines()) > 4


def test_spec_validate_ok_and_failing(tmp_path: Path) -> None:
    ok = invoke("spec", "validate", str(ROOT / "agents/venus-tiny"), str(ROOT / "agents/ui-venus-1.5-8b"))
    assert ok.exit_code == 0 and ok.output.count("✓") == 2
    bad = tmp_path / "agent.yaml"
    bad.write_text("name: x\nmerge: {method: nope}\n")
    res = invoke("spec", "validate", str(bad))
    assert res.exit_code == 1
    assert f"{bad}:2: merge.method: Value error, unknown merge_methods name 'nope'" in res.output


def test_spec_show_applies_overrides() -> None:
    res = invoke("spec", "show", str(ROOT / "agents/venus-tiny"), "--set", "offline_rl.grounding.lr=1e-6")
    assert res.exit_code == 0
    shown = yaml.safe_load(res.output)
    assert shown["offline_rl"]["grounding"]["lr"] == 1e-6 and shown["name"] == "venus-tiny"
    res = invoke("spec", "show", str(ROOT / "agents/venus-tiny"), "--json", "--set", "merge.density=0.5")
    assert json.loads(res.output)["merge"]["density"] == 0.5


def test_spec_show_bad_override_exits_2() -> None:
    res = runner.invoke(app, ["spec", "show", str(ROOT / "agents/venus-tiny"), "--set", "mid_train.lr=-1"])
    assert res.exit_code == 2 and "mid_train.lr" in res.output


def test_spec_template_writes_the_committed_template(tmp_path: Path) -> None:
    out = tmp_path / "t.yaml"
    assert invoke("spec", "template", "-o", str(out)).exit_code == 0
    assert out.read_text() == (ROOT / "agents/_template/agent.yaml").read_text()


def test_new_agent_from_template_and_from_agent(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    (agents / "_template").mkdir(parents=True)
    (agents / "_template" / "agent.yaml").write_text((ROOT / "agents/_template/agent.yaml").read_text())
    res = invoke("new-agent", "shop-bot", "--agents-dir", str(agents))
    assert res.exit_code == 0
    text = (agents / "shop-bot" / "agent.yaml").read_text()
    assert "name: shop-bot" in text and "# w1: weight of the format reward" in text  # comments kept
    assert invoke("spec", "validate", str(agents / "shop-bot")).exit_code == 0

    res = invoke("new-agent", "tiny-copy", "--agents-dir", str(agents), "--from", str(ROOT / "agents/venus-tiny"))
    assert res.exit_code == 0
    assert "synth-grounding-l0" in (agents / "tiny-copy" / "agent.yaml").read_text()

    again = runner.invoke(app, ["new-agent", "shop-bot", "--agents-dir", str(agents)])
    assert again.exit_code == 2 and "exists" in again.output


def test_new_agent_without_a_checkout_generates_the_template(tmp_path: Path) -> None:
    res = invoke("new-agent", "fresh", "--agents-dir", str(tmp_path / "nowhere"))
    assert res.exit_code == 0 and (tmp_path / "nowhere/fresh/agent.yaml").exists()


def test_new_agent_rejects_a_bad_name(tmp_path: Path) -> None:
    res = runner.invoke(app, ["new-agent", "Bad_Name", "--agents-dir", str(tmp_path)])
    assert res.exit_code == 2 and "lowercase" in res.output
    assert not (tmp_path / "Bad_Name").joinpath("agent.yaml").exists()
    assert list(tmp_path.rglob("*.tmp")) == []


def test_version() -> None:
    from venus_core import __version__

    assert invoke("version").output.strip() == __version__


@pytest.mark.slow
def test_run_reports_the_failing_stage(tmp_path: Path) -> None:
    """`venus run` drives the real pipeline (tests/pipelines runs it to success); a broken data
    source stops it at score_data with the job's own error and exit status 1."""
    broken = "data.sources=[{name: broken, kind: dataset, uri: " + str(tmp_path / "missing") + "}]"
    res = runner.invoke(app, ["run", str(ROOT / "agents/venus-tiny"), "--quiet", "--set", broken,
                              "--set", "offline_rl.grounding.sources=[]",
                              "--out", str(tmp_path / "out")])
    assert res.exit_code == 1
    assert "stage score_data failed" in res.output and "missing" in res.output
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["status"] == "FAILURE"


@pytest.mark.slow
def test_run_off_a_terminal_prints_a_line_per_stage_change_and_keeps_kfp_output_in_the_logs(tmp_path: Path) -> None:
    """Without --verbose, kfp.local's stream (executor inputs, artifact URIs) goes to OUT/logs only;
    stdout, not a terminal here, gets one plain line per stage state change and the failing log's end."""
    broken = "data.sources=[{name: broken, kind: dataset, uri: " + str(tmp_path / "missing") + "}]"
    out = tmp_path / "out"
    res = runner.invoke(app, ["run", str(ROOT / "agents/venus-tiny"), "--set", broken,
                              "--set", "offline_rl.grounding.sources=[]", "--out", str(out)])
    assert res.exit_code == 1
    assert "stages: score_data, mid_train, offline_rl: grounding, offline_rl: mobile" in res.output
    changes = [line.split()[1:3] for line in res.output.splitlines() if line[:2].isdigit() and line[2:3] == ":"]
    assert changes == [["score_data", "running"], ["score_data", "failed"]]
    for raw in ("Executing task", "executor_input", "Streamed logs", "finished with status"):
        assert raw not in res.output
    stage_log = (out / "logs" / "score_data.log").read_text()
    assert "Executing task 'score-data'" in stage_log and "missing" in stage_log
    assert "finished with status FAILURE" in (out / "logs" / "pipeline.log").read_text()
    assert f"stage score_data failed (last lines of {out.resolve() / 'logs' / 'score_data.log'})" in res.output
    assert "missing" in res.output.split("stage score_data failed")[1]


def test_run_rejects_a_bad_spec_before_running(tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", str(ROOT / "agents/venus-tiny"), "--set", "mid_train.lr=-1",
                              "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "mid_train.lr" in res.output and not (tmp_path / "o").exists()


def test_data_synth_command(tmp_path: Path) -> None:
    out = tmp_path / "d"
    res = invoke("data", "synth", "--kind", "vqa", "-n", "5", "--level", "2", "-o", str(out))
    assert res.exit_code == 0, res.output
    assert "5 records" in res.output and (out / "manifest.json").exists()
    bad = runner.invoke(app, ["data", "synth", "--kind", "nope", "-o", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "--kind 'nope'" in bad.output


def test_main_keeps_the_exit_code_and_freezes_the_heap_for_a_fast_exit(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`venus` (venus_core.cli:main) freezes the GC before the interpreter shuts down, so shutdown's
    full collection skips the objects torch and numba leave (~1 s of every `venus merge`); the
    command's output and exit status are unchanged."""
    import gc

    from venus_core.cli import main

    gc.unfreeze()
    try:
        for argv, code in ((["venus", "version"], 0), (["venus", "merge", "--base", "b"], 2)):
            monkeypatch.setattr("sys.argv", argv)
            with pytest.raises(SystemExit) as exit_:
                main()
            assert exit_.value.code == code
            assert gc.get_freeze_count() > 0
            gc.unfreeze()
        assert capsys.readouterr().out.strip().splitlines()[0].count(".") >= 1  # the version
    finally:
        gc.unfreeze()
