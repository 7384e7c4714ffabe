"""A `kind: collect` data source: MiniWoB++ oracle episodes played in a REAL headless Chromium when
the data stage builds the spec's sources, every attempt counted (kept + failed = attempted), and the
score_data job taking them into the mixture with the counts in its report and metrics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from venus_core.config.spec import DataSourceSpec
from venus_core.data import DatasetReader
from venus_core.data.build import build_source, collect_report_path, read_collect_report
from venus_core.data.schema import Trajectory
from venus_core.data.validate import validate_dataset
from venus_core.envs.miniwob_oracle import SOLVERS, OracleError, OracleStep, Page

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny" / "agent.yaml"


def _source(tasks: list[str], n: int = 2, seed: int = 40) -> DataSourceSpec:
    return DataSourceSpec(name="mw", kind="collect", collect={"tasks": tasks, "n": n, "seed": seed})


@pytest.mark.slow
def test_collect_source_keeps_solved_episodes_and_counts_every_attempt(tmp_path: Path) -> None:
    path, manifest = build_source(_source(["click-test", "click-color"]), tmp_path)
    assert path == tmp_path / "mw" and validate_dataset(path).ok
    info = read_collect_report(tmp_path, "mw")
    assert info["settings"] == {"env": "miniwob", "tasks": ["click-test", "click-color"], "n": 2, "seed": 40, "workers": 4}
    attempted = sum(t["attempted"] for t in info["tasks"].values())
    assert attempted == 4 and info["written"] == manifest.records == attempted - len(info["failures"])
    records = list(DatasetReader(path))
    assert records and all(isinstance(r, Trajectory) and r.platform == "web" and r.success for r in records)
    assert {r.provenance.seed for r in records} <= {40, 41}
    assert {r.provenance.generator for r in records} == {"miniwob-oracle"}


def test_unknown_task_is_named_before_a_browser_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"source 'mw': no oracle for MiniWoB task 'chase-circle'"):
        build_source(_source(["chase-circle"]), tmp_path)
    assert not collect_report_path(tmp_path, "mw").exists()


@pytest.mark.slow
def test_a_task_solved_on_no_page_is_an_error_with_its_failures_counted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def lost(page: Page) -> Iterator[OracleStep]:
        raise OracleError("the page does not look as expected (test)")
        yield  # a generator, like every solver

    monkeypatch.setitem(SOLVERS, "click-test-2", lost)
    with pytest.raises(RuntimeError, match=r"source 'mw': the miniwob oracle succeeded on no page of "
                                           r"\['click-test-2'\] \(2 attempted each; first failures: .*test"):
        build_source(_source(["click-test", "click-test-2"]), tmp_path)
    info = read_collect_report(tmp_path, "mw")  # written before the error: the attempts are not lost
    assert info["tasks"]["click-test-2"] == {"attempted": 2, "succeeded": 0, "success_rate": 0.0}
    assert [f["seed"] for f in info["failures"] if f["task"] == "click-test-2"] == [40, 41]


@pytest.mark.slow
def test_score_data_mixes_collected_episodes_and_reports_the_attempts(tmp_path: Path) -> None:
    from venus_core.runtime.score_data import main as score_main

    raw = yaml.safe_load(SPEC.read_text(encoding="utf-8"))
    raw["offline_rl"]["grounding"]["sources"] = []
    raw["data"]["sources"] = [
        {"name": "g0", "kind": "synth", "synth": {"kind": "grounding", "n": 40, "level": 0, "seed": 1}},
        {"name": "mix", "kind": "synth", "synth": {"kind": "mixture", "n": 60, "level": 2, "seed": 3}},
        {"name": "mw", "kind": "collect", "collect": {"tasks": ["click-test"], "n": 3, "seed": 50}},
    ]
    spec_dir = tmp_path / "agent"
    spec_dir.mkdir()
    (spec_dir / "agent.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    out = tmp_path / "out"
    assert score_main(["--spec", str(spec_dir), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    c = report["collected"]["mw"]
    assert c["tasks"]["click-test"]["attempted"] == 3
    m = report["metrics"]
    assert m["collect/mw/attempted"] == 3 == m["collect/mw/kept"] + m["collect/mw/failed"]
    assert m["collect/mw/kept"] == c["written"] == report["scoring"]["mw"]["read"]
    manifest = json.loads((out / "mixture" / "mix_manifest.json").read_text(encoding="utf-8"))
    used = sum(manifest["splits"][split]["by_source"].get("mw", 0) for split in ("train", "validation"))
    assert 0 < used <= c["written"]


def test_score_data_names_a_collect_source_it_cannot_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from venus_core.runtime.score_data import main as score_main

    raw = yaml.safe_load(SPEC.read_text(encoding="utf-8"))
    raw["offline_rl"]["grounding"]["sources"] = []
    raw["data"]["sources"] = [{"name": "mw", "kind": "collect", "collect": {"tasks": ["no-such-task"], "n": 1}}]
    spec_dir = tmp_path / "agent"
    spec_dir.mkdir()
    (spec_dir / "agent.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert score_main(["--spec", str(spec_dir), "--out", str(tmp_path / "out")]) == 1
    assert "score_data: error: source 'mw': no oracle for MiniWoB task 'no-such-task'" in capsys.readouterr().err


@pytest.mark.slow
def test_collected_episodes_do_not_depend_on_the_number_of_workers(tmp_path: Path) -> None:
    from venus_core.envs.miniwob_collect import collect

    one = collect(["click-test", "click-color"], 3, tmp_path / "one", seed=60, workers=1)
    three = collect(["click-test", "click-color"], 3, tmp_path / "three", seed=60, workers=3)
    assert one.attempted == three.attempted == {"click-test": 3, "click-color": 3}
    assert one.succeeded == three.succeeded and one.written == three.written > 0
    a, b = DatasetReader(tmp_path / "one"), DatasetReader(tmp_path / "three")
    ra, rb = list(a), list(b)
    assert [r.id for r in ra] == [r.id for r in rb]  # written in (task, seed) order both times
    for x, y in zip(ra, rb, strict=True):
        assert x.goal == y.goal and [s.action for s in x.steps] == [s.action for s in y.steps]
        assert [s.target_box for s in x.steps] == [s.target_box for s in y.steps]
        for sx, sy in zip(x.steps, y.steps, strict=True):
            assert a.open_image(sx.image).tobytes() == b.open_image(sy.image).tobytes()
