"""`venus data import` through a fresh typer app (the command is wired by `register`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from venus_core.cli.import_cmd import register
from importer_helpers import h, src  # noqa: F401 - pytest fixtures


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """data tools"""

    register(app)
    return app


def _source(src: Path, h: Any) -> None:
    h.png(src / "screenspotv2_image" / "a.png", 100, 100)
    h.dump(src / "screenspot_mobile_v2.json", [
        {"img_filename": "a.png", "bbox": [10, 10, 10, 10], "instruction": "ok"},
        {"img_filename": "a.png", "bbox": [10, 10, 100, 10], "instruction": "too wide"},
    ])


def test_import_prints_counts_and_writes_report(src: Path, tmp_path: Path, h: Any) -> None:
    _source(src, h)
    out = tmp_path / "out"
    res = CliRunner().invoke(_app(), ["import", "--format", "screenspot-v2", str(src), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "read 2, imported 1, quarantined 1" in res.output
    assert "bad_box=1" in res.output
    assert json.loads((out / "import_report.json").read_text())["quarantined"] == 1

    res = CliRunner().invoke(_app(), ["import", "-f", "screenspot-v2", str(src), "-o", str(out),
                                      "--resume", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert (report["read"], report["imported"], report["resumed_from"]) == (2, 1, 2)


def test_import_errors_exit_nonzero(src: Path, tmp_path: Path, h: Any) -> None:
    _source(src, h)
    runner = CliRunner()
    res = runner.invoke(_app(), ["import", "--format", "nope", str(src), "-o", str(tmp_path / "o")])
    assert res.exit_code == 1 and "unknown importers 'nope'" in res.output
    res = runner.invoke(_app(), ["import", "-f", "screenspot-v2", str(src), "-o", str(tmp_path / "o"),
                                 "--option", "novalue"])
    assert res.exit_code == 2 and "KEY=VALUE" in res.output
    res = runner.invoke(_app(), ["import", str(src), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "--format is required" in res.output
    res = runner.invoke(_app(), ["import", "-f", "screenspot-v2", str(src)])
    assert res.exit_code == 2 and "--out" in res.output
    runner.invoke(_app(), ["import", "-f", "screenspot-v2", str(src), "-o", str(tmp_path / "o")])
    res = runner.invoke(_app(), ["import", "-f", "screenspot-v2", str(src), "-o", str(tmp_path / "o")])
    assert res.exit_code == 1 and "--overwrite" in res.output
    res = runner.invoke(_app(), ["import", "-f", "screenspot-v2", str(src), "-o", str(tmp_path / "o"),
                                 "--overwrite"])
    assert res.exit_code == 0, res.output


def test_progress_counts_source_records_read(src: Path, tmp_path: Path, h: Any) -> None:
    from venus_core.data.importers import run_import

    _source(src, h)
    calls: list[tuple[int, int | None]] = []
    report = run_import("screenspot-v2", src, tmp_path / "out", progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, None), (2, None)] and report.read == 2 == report.imported + report.quarantined
