"""`python -m venus_core.runtime.offline_rl` end to end, a few steps on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from venus_core.runtime.offline_rl import exclude_records, main, resolve_data_root, split_held_out

SPEC = str(Path(__file__).resolve().parents[2] / "agents" / "venus-tiny")


def _weights(d: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def test_grounding_job_writes_checkpoint_metrics_and_report(tiny_dir: Path, grounding_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    rc = main([
        "--domain", "grounding", "--spec", SPEC, "--model", str(tiny_dir), "--data", str(grounding_data),
        "--out", str(out),
        "--set", "offline_rl.grounding.reward=rl_test_length", "--set", "offline_rl.grounding.max_steps=2",
        "--set", "offline_rl.grounding.prompts_per_step=2", "--set", "offline_rl.grounding.group_size=2",
        "--set", "offline_rl.grounding.max_new_tokens=4", "--set", "offline_rl.grounding.lr=0.01",
        "--set", "eval.held_out=3",
    ])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert report["records"] == {"train": 10, "held_out": 2, "kinds_seen": {"grounding": 12}, "excluded": 0}
    for key in ("hit", "parsed"):
        for side in ("held_out_before", "held_out_after"):
            r = report[side][key]
            assert r["n"] == 2 and 0 <= r["ci95_low"] <= r["value"] <= r["ci95_high"] <= 1
    prov = report["provenance"]
    assert prov["job"] == "offline_rl" and len(prov["inputs"]) == 2 and prov["spec"]["offline_rl"]["grounding"]["max_steps"] == 2
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if x["kind"] == "metrics"]
    assert [x["step"] for x in steps] == [0, 1] and "reward/mean" in steps[0]["metrics"]
    before, after = _weights(tiny_dir), _weights(out / "model")
    assert set(before) == set(after)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert (out / "model" / "venus_provenance.json").is_file()


def _mobile_job(tiny_dir: Path, nav_data: Path, out: Path, *sets: str) -> int:
    """Six GRPO steps of the mobile job, two prompts of two completions a step, R = 1."""
    args = ["offline_rl.mobile.max_steps=6", "offline_rl.mobile.prompts_per_step=2", "offline_rl.mobile.group_size=2",
            "offline_rl.mobile.max_new_tokens=4", "offline_rl.mobile.history_alignment.rollouts=1", "eval.held_out=2",
            *sets]
    return main(["--domain", "mobile", "--spec", SPEC, "--model", str(tiny_dir), "--data", str(nav_data),
                 "--out", str(out), *[x for a in args for x in ("--set", a)]])


def test_mobile_job_runs_history_alignment_and_reports_action_mix(tiny_dir: Path, nav_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "nav"
    assert _mobile_job(tiny_dir, nav_data, out) == 0
    report = json.loads((out / "report.json").read_text())
    after = report["held_out_after"]
    assert {"type_match", "step_success", "parsed"} <= set(after)
    by_type = {k: v for k, v in after.items() if k.startswith("step_success/")}  # per ground-truth action type
    assert by_type and sum(v["n"] for v in by_type.values()) == after["step_success"]["n"]
    assert sum(v["k"] for v in by_type.values()) == after["step_success"]["k"]
    nav = report["navigation"]
    assert nav["action_mix_before"] and nav["epochs"] and nav["epochs"][0]["epoch"] == 0
    assert report["trainer"]["frozen_vision_params"] > 0


def test_a_short_run_aligns_histories_when_epochs_are_slices(tiny_dir: Path, nav_data: Path, tmp_path: Path) -> None:
    """epoch_size 4 with 2 prompts a step: an epoch boundary every 2 optimizer steps, each pooling
    rollouts of its own 4 steps only (R = 1 each), so a 6-step run aligns twice."""
    out = tmp_path / "nav"
    assert _mobile_job(tiny_dir, nav_data, out, "offline_rl.mobile.history_alignment.epoch_size=4",
                       "offline_rl.mobile.sparse_actions.actions=[]") == 0
    nav = json.loads((out / "report.json").read_text())["navigation"]
    assert [(e["epoch"], e["epoch_steps"]) for e in nav["epochs"]] == [(0, 4), (1, 4)]


def test_job_rejects_data_without_domain_records(tiny_dir: Path, grounding_data: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no usable records"):
        main(["--domain", "web", "--spec", SPEC, "--model", str(tiny_dir), "--data", str(grounding_data),
              "--out", str(tmp_path / "x")])


def test_split_is_by_group_and_deterministic() -> None:
    class R:
        def __init__(self, i: int) -> None:
            self.id = f"r{i}"

    recs = [R(i) for i in range(50)]
    a = split_held_out(recs, 7, 0)
    b = split_held_out(recs, 7, 0)
    assert [r.id for r in a[1]] == [r.id for r in b[1]] and len(a[1]) == 7 and len(a[0]) == 43


def _copy_subset(src: Path, dst: Path, keep: int) -> list[str]:
    """A dataset with the first `keep` records of `src` (images re-put); returns their ids."""
    from venus_core.data.store import DatasetReader, DatasetWriter

    reader = DatasetReader(src)
    ids = []
    with DatasetWriter(dst) as w:
        for rec in list(reader)[:keep]:
            with reader.open_image(rec.image) as img:  # type: ignore[attr-defined]
                ref = w.put_image(img.copy())
            w.write(rec.model_copy(update={"image": ref}))
            ids.append(rec.id)
    return ids


def _score_root(tmp_path: Path, grounding_data: Path, validation_keep: int) -> Path:
    root = tmp_path / "scored-out"
    (root / "scored" / "g0").mkdir(parents=True)
    (root / "scored" / "g0" / "dataset").symlink_to(grounding_data)
    (root / "mixture").mkdir()
    (root / "mixture" / "train").symlink_to(grounding_data)
    _copy_subset(grounding_data, root / "mixture" / "validation", validation_keep)
    (root / "report.json").write_text(json.dumps({"final_datasets": {"g0": "scored/g0/dataset"}}))
    return root


def test_data_root_takes_the_named_sources_minus_the_validation_split(tiny_dir: Path, grounding_data: Path,
                                                                     tmp_path: Path) -> None:
    from venus_core.config import load_spec

    root = _score_root(tmp_path, grounding_data, validation_keep=4)
    spec = load_spec(SPEC, ["data.sources.0.name=g0", "offline_rl.grounding.sources=[g0]"])
    data, exclude = resolve_data_root(root, spec, "grounding")
    assert data == [str(root / "scored/g0/dataset")] and exclude == [str(root / "mixture/validation")]
    assert resolve_data_root(root, spec, "mobile") == ([str(root / "mixture/train")], [])  # no sources: the mixture
    from venus_core.data.store import DatasetReader

    records = list(DatasetReader(grounding_data))
    kept, n = exclude_records(records, exclude)
    assert n == 4 and len(kept) == len(records) - 4
    assert not {r.id for r in kept} & {r.id for r in DatasetReader(root / "mixture/validation")}
    out = tmp_path / "out"
    assert main(["--domain", "grounding", "--spec", SPEC, "--model", str(tiny_dir), "--data-root", str(root),
                 "--out", str(out), "--set", "data.sources.0.name=g0", "--set", "offline_rl.grounding.sources=[g0]",
                 "--set", "offline_rl.grounding.reward=rl_test_length", "--set", "offline_rl.grounding.max_steps=1",
                 "--set", "offline_rl.grounding.prompts_per_step=2", "--set", "offline_rl.grounding.group_size=2",
                 "--set", "offline_rl.grounding.max_new_tokens=4", "--set", "eval.held_out=2"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["records"]["excluded"] == 4 and report["records"]["train"] + report["records"]["held_out"] == 8
    assert report["data"]["exclude"] == exclude


def test_data_root_errors_name_the_problem(grounding_data: Path, tmp_path: Path) -> None:
    from venus_core.config import SpecError, load_spec

    root = _score_root(tmp_path, grounding_data, validation_keep=1)
    spec = load_spec(SPEC, ["data.sources.0.name=g9", "offline_rl.grounding.sources=[g9]"])
    with pytest.raises(ValueError, match=r"sources \['g9'\].*final_datasets \['g0'\]"):
        resolve_data_root(root, spec, "grounding")
    with pytest.raises(ValueError, match="cannot read final_datasets"):
        resolve_data_root(tmp_path / "nowhere", spec, "grounding")
    with pytest.raises(SpecError, match="offline_rl.web.sources: 'nope' is not a data source"):
        load_spec(SPEC, ["offline_rl.web.sources=[nope]"])
