from __future__ import annotations

from pathlib import Path

import pytest

from venus_core.eval.grounding import evaluate_grounding
from venus_core.models.prompts import grounding_prompt

from eval_fixtures import Scripted, write_grounding, write_trajectories

# g0 right (inside), g1 wrong (outside), g2 right on the edge (inclusive), g3 wrong format,
# g4 refused on an answerable sample, r0 refusal right, r1 refusal wrong (answered a point).
ANSWERS = {"g0": "[200,200]", "g1": "[900,900]", "g2": "[700,700]", "g3": "click somewhere",
           "g4": "[-1,-1]", "r0": "[-1,-1]", "r1": "[10,10]"}


def _rate(d: dict) -> tuple[int, int]:
    return d["k"], d["n"]


def test_aggregation_exact(grounding_data: Path) -> None:
    pred = Scripted(ANSWERS)
    res = evaluate_grounding(grounding_data, pred, chunk=3)
    s = res.summary
    assert _rate(s["overall"]) == (3, 7)
    assert _rate(s["answerable"]) == (2, 5)
    assert _rate(s["refusal"]) == (1, 2)
    assert _rate(s["false_refusal"]) == (1, 5)
    assert s["wrong_format"]["count"] == 1 and _rate(s["wrong_format"]) == (1, 7)
    # text: g0 ok, g2 ok, g4 no, r0 ok -> 3/4; icon: g1, g3, r1 wrong -> 0/3
    assert {k: _rate(v) for k, v in s["by_ui_type"].items()} == {"icon": (0, 3), "text": (3, 4)}
    assert {k: _rate(v) for k, v in s["by_platform"].items()} == {"desktop": (3, 5), "web": (0, 2)}
    assert {k: _rate(v) for k, v in s["by_application"].items()} == {"vscode": (2, 3), "word": (1, 4)}
    assert {k: _rate(v) for k, v in s["by_group"].items()} == {"Dev": (2, 3), "Office": (1, 4)}
    assert "by_data_source" not in s  # no sample has one: not reported as "unknown"
    lo, hi = s["overall"]["ci95_low"], s["overall"]["ci95_high"]
    assert 0 < lo < 3 / 7 < hi < 1
    by_id = {x["id"]: x for x in res.samples}
    assert by_id["g0"]["point"] == [200, 200] and by_id["g3"]["point"] is None and not by_id["g3"]["parsed"]
    assert by_id["r0"]["refused"] and by_id["r0"]["correct"]
    assert res.benchmark == "screenspot-pro" and res.sources == {"screenspot-pro": 7}
    assert pred.calls == [3, 3, 1]  # chunked


def test_prompts_are_the_venus_grounding_prompt(grounding_data: Path) -> None:
    pred = Scripted(ANSWERS)
    evaluate_grounding(grounding_data, pred)
    assert [q.prompt for q in pred.seen][:2] == [grounding_prompt("find g0"), grounding_prompt("find g1")]
    assert pred.seen[0].image.size == (200, 100)


def test_limit_and_synthetic_is_not_a_benchmark(tmp_path: Path) -> None:
    data = write_grounding(tmp_path / "syn", source="synth")
    res = evaluate_grounding(data, Scripted(ANSWERS), limit=2)
    assert _rate(res.summary["overall"]) == (1, 2) and res.benchmark is None and res.settings["limit"] == 2
    with pytest.raises(ValueError, match="limit"):
        evaluate_grounding(data, Scripted(ANSWERS), limit=0)


def test_dataset_without_grounding_records_is_an_error(tmp_path: Path) -> None:
    data = write_trajectories(tmp_path / "nav")
    with pytest.raises(ValueError, match=r"no grounding records .*trajectory"):
        evaluate_grounding(data, Scripted({}))


def test_predictor_returning_too_few_answers_is_an_error(grounding_data: Path) -> None:
    class Short(Scripted):
        def predict(self, queries, max_new_tokens):  # type: ignore[no-untyped-def]
            return super().predict(queries, max_new_tokens)[:-1]

    with pytest.raises(RuntimeError, match="returned 6 answers for 7 queries"):
        evaluate_grounding(grounding_data, Short({}))


def test_progress_reports_the_scored_samples_against_the_manifest(grounding_data: Path) -> None:
    calls: list[tuple[int, int | None]] = []
    res = evaluate_grounding(grounding_data, Scripted(ANSWERS), chunk=3, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(3, 7), (6, 7), (7, 7)] and calls[-1][0] == len(res.samples)
    calls.clear()
    res = evaluate_grounding(grounding_data, Scripted(ANSWERS), limit=2, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(2, 2)] and len(res.samples) == 2
