"""Batched greedy evaluation (left-padded rows, batches cut from length-sorted queries) answers
exactly what one query at a time answers, in query order."""

from __future__ import annotations

from pathlib import Path

import pytest

from venus_core.config import load_spec
from venus_core.config.spec import HeldOutSuitesSpec
from venus_core.eval.grounding import evaluate_grounding
from venus_core.eval.held_out import build_suites
from venus_core.eval.navigation import evaluate_nav_offline
from venus_core.eval.predictors import LocalPredictor, Query
from venus_core.train.base import BOOTSTRAP_DIR


@pytest.fixture(scope="module")
def bootstrap() -> tuple[object, object]:
    """The shipped bootstrap checkpoint: its answers vary in length and content (a random init's
    barely do), so an off-by-one in padding or order would show."""
    import torch

    from venus_core.models.loading import load_model

    torch.set_num_threads(1)
    return load_model(str(BOOTSTRAP_DIR), load_spec("agents/venus-tiny").model, "cpu")


@pytest.fixture(scope="module")
def suites(tmp_path_factory: pytest.TempPathFactory) -> Path:
    section = HeldOutSuitesSpec(grounding_levels=[0, 2], grounding_per_level=6, navigation_steps=8)
    return build_suites(section, tmp_path_factory.mktemp("suites"))[0]


def _predictor(model_processor: tuple[object, object], batch_size: int) -> LocalPredictor:
    model, processor = model_processor
    return LocalPredictor(model, processor, name=f"bs{batch_size}", batch_size=batch_size)


def test_batched_grounding_and_navigation_equal_one_by_one(bootstrap: tuple[object, object], suites: Path) -> None:
    for evaluate, data, tokens in ((evaluate_grounding, suites / "grounding", 32),
                                   (evaluate_nav_offline, suites / "navigation", 48)):
        one = evaluate(data, _predictor(bootstrap, 1), max_new_tokens=tokens)
        batched = evaluate(data, _predictor(bootstrap, 5), max_new_tokens=tokens)
        answers = [s["answer"] for s in one.samples]
        assert [s["id"] for s in batched.samples] == [s["id"] for s in one.samples]
        assert [s["answer"] for s in batched.samples] == answers
        assert len(set(answers)) > 1  # the model answers differently per sample: the comparison means something
        assert batched.summary == one.summary


def test_batches_mix_prompt_lengths_and_answers_keep_query_order(bootstrap: tuple[object, object],
                                                                suites: Path) -> None:
    from venus_core.data.store import DatasetReader
    from venus_core.eval.navigation import _steps, step_prompt
    from venus_core.models.prompts import grounding_prompt

    g = DatasetReader(suites / "grounding")
    n = DatasetReader(suites / "navigation")
    queries = [Query(r.id, g.open_image(r.image), grounding_prompt(r.instruction)) for r in list(g)[:4]]
    queries += [Query(s.id, n.open_image(s.image), step_prompt(s, "high")) for s in list(_steps(n, 2, {}))]  # type: ignore[arg-type]
    lengths = {len(q.prompt) for q in queries}
    assert len(lengths) >= 3  # rows of different lengths share a batch: left padding is exercised
    one = _predictor(bootstrap, 1).predict(queries, 24)
    assert _predictor(bootstrap, 8).predict(queries, 24) == one
    reverse = _predictor(bootstrap, 3).predict(queries[::-1], 24)
    assert reverse == one[::-1]
