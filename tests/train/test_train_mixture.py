from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from venus_core.config.spec import MixtureSpec
from venus_core.train.mixture import MixtureSampler, split_for_rank

PAPER = MixtureSpec()
POOLS = {"perception": 7, "vqa": 50, "grounding": 300, "navigation": 11}


def test_every_batch_follows_the_ratios_within_one_sample() -> None:
    s = MixtureSampler(POOLS, PAPER, batch_size=16, seed=3)
    for b in range(1, 201):
        batch = s.next_batch()
        assert len(batch) == 16
        counts = {d: sum(1 for x, _ in batch if x == d) for d in POOLS}
        for d, k in counts.items():
            assert abs(k - getattr(PAPER, d) * 16) < 1.0 + 1e-9, (b, d, k)
        for d in POOLS:  # running totals never stray more than one sample from the ratio
            assert abs(s.drawn[d] - getattr(PAPER, d) * 16 * b) <= 1.0 + 1e-9
    rep = s.report()
    assert rep["samples"] == 3200
    for d in POOLS:
        assert math.isclose(rep["drawn_ratios"][d], getattr(PAPER, d), abs_tol=1 / 3200)


def test_indices_stay_in_their_pool_and_cover_it_each_pass() -> None:
    s = MixtureSampler(POOLS, PAPER, batch_size=16, seed=0)
    seen: dict[str, list[int]] = {d: [] for d in POOLS}
    for _ in range(60):
        for d, i in s.next_batch():
            assert 0 <= i < POOLS[d]
            seen[d].append(i)
    first_pass = seen["perception"][: POOLS["perception"]]
    assert sorted(first_pass) == list(range(POOLS["perception"]))


def test_empty_domain_is_dropped_and_ratios_renormalised() -> None:
    s = MixtureSampler({"grounding": 10, "navigation": 10}, PAPER, batch_size=10)
    assert s.dropped == ["perception", "vqa"]
    total = PAPER.grounding + PAPER.navigation
    assert math.isclose(s.effective_ratios["grounding"], PAPER.grounding / total)
    assert {d for d, _ in s.next_batch()} == {"grounding", "navigation"}


def test_no_usable_domain_is_an_error() -> None:
    with pytest.raises(ValueError, match="no domain"):
        MixtureSampler({"vqa": 0}, PAPER, batch_size=4)
    with pytest.raises(ValueError, match="unknown domain"):
        MixtureSampler({"audio": 3}, PAPER, batch_size=4)


@settings(max_examples=25, deadline=None)
@given(k=st.integers(0, 40), seed=st.integers(0, 10**6), batch=st.integers(1, 20))
def test_state_dict_resumes_the_exact_sequence(k: int, seed: int, batch: int) -> None:
    a = MixtureSampler(POOLS, PAPER, batch_size=batch, seed=seed)
    for _ in range(k):
        a.next_batch()
    b = MixtureSampler(POOLS, PAPER, batch_size=batch, seed=seed)
    b.load_state_dict(a.state_dict())
    assert [a.next_batch() for _ in range(15)] == [b.next_batch() for _ in range(15)]


def test_state_from_another_run_is_refused() -> None:
    a = MixtureSampler(POOLS, PAPER, batch_size=8, seed=1)
    b = MixtureSampler(POOLS, PAPER, batch_size=16, seed=1)
    with pytest.raises(ValueError, match="batch_size"):
        b.load_state_dict(a.state_dict())


def test_rank_split_partitions_the_batch() -> None:
    batch = MixtureSampler(POOLS, PAPER, batch_size=12).next_batch()
    parts = [split_for_rank(batch, r, 3) for r in range(3)]
    assert sorted(x for p in parts for x in p) == sorted(batch) and all(len(p) == 4 for p in parts)
