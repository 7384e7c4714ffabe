"""Navigation GRPO epochs as slices (`history_alignment.epoch_size`): a run shorter than one pass over
its data still reaches an epoch boundary, where history alignment and the sparse variants happen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from venus_core.config.training import HistoryAlignmentSpec, MobileRLSpec, SparseActionSpec
from venus_core.rl.navigation import NavigationEpochs
from venus_core.runtime.offline_rl import load_records
from venus_core.train.tracker import NullTracker


def _epochs(nav_data: Path, epoch_size: int, *, enabled: bool = True) -> NavigationEpochs:
    steps, opener, _ = load_records([str(nav_data)], "mobile", 5)
    spec = MobileRLSpec(history_alignment=HistoryAlignmentSpec(enabled=enabled, epoch_size=epoch_size),
                        sparse_actions=SparseActionSpec(actions=["Finished"], variants=2))
    return NavigationEpochs(steps, opener, spec, NullTracker())


def test_epochs_are_consecutive_slices_of_one_shuffle(nav_data: Path) -> None:
    ne = _epochs(nav_data, 3)
    ids = [s.id for s in ne.base]
    assert len(ids) > 3
    slices = [ne.epoch_ids(e) for e in range(len(ids))]
    assert all(s is not None and len(s) == 3 for s in slices)
    # the first epochs cover every step once before any repeats (a pass over the data, N at a time)
    first = [x for s in slices[: len(ids) // 3] for x in s]  # type: ignore[union-attr]
    assert len(first) == len(set(first)) == 3 * (len(ids) // 3)
    assert set().union(*slices[: -(-len(ids) // 3)]) == set(ids)  # type: ignore[arg-type]
    assert ne.epoch_ids(1) == _epochs(nav_data, 3).epoch_ids(1)  # seeded: a resumed run gets the same epochs
    # an epoch's prompts: its steps and the sparse variants of those steps, nothing else
    for e in range(3):
        got = [it.record_id for it in ne.items_for_epoch(e)]
        own = slices[e]
        assert {r.split("#v")[0] for r in got} == own
        rare = [s.id for s in ne.base if s.id in own and s.action.startswith("Finished")]  # type: ignore[operator]
        assert len(got) == 3 + 2 * len(rare)
    # the same epochs with alignment off (a fair on / off comparison), all steps with epoch_size 0 or >= the data
    assert _epochs(nav_data, 3, enabled=False).epoch_ids(2) == slices[2]
    for n in (0, len(ids), len(ids) + 5):
        whole = _epochs(nav_data, n)
        assert whole.epoch_ids(0) is None and len(whole.items_for_epoch(0)) == len(ids) + len(whole.variants)


def test_epoch_size_is_not_negative() -> None:
    with pytest.raises(ValueError):
        HistoryAlignmentSpec(epoch_size=-1)


def test_alignment_rollouts_are_sampled_in_calls_as_large_as_a_grpo_step(
        nav_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """R rollouts per step of the epoch, prompts_per_step x G sequences per sampling call (not one
    call per prompts_per_step steps), every step once, its sampling seed its own whatever the chunking.
    The sampler is replaced by a recorder here: what is under test is which steps go to which call."""
    import contextlib
    from types import SimpleNamespace

    from venus_core.config.registry import REWARDS
    from venus_core.rl import navigation
    from venus_core.train.distributed import DistEnv

    calls: list[tuple[int, int, list[int]]] = []

    def fake_sample(model: Any, processor: Any, prompts: list[Any], r: int, max_new: int, **kw: Any) -> Any:
        calls.append((len(prompts), r, list(kw["group_seeds"])))
        return SimpleNamespace(texts=["<think>t</think><action>Finished(content='')</action>"] * (len(prompts) * r))

    monkeypatch.setattr(navigation, "sample_groups", fake_sample)
    seeds = {}
    for g, r, ppstep in ((8, 1, 4), (8, 2, 4), (2, 4, 1)):
        steps, opener, _ = load_records([str(nav_data)], "mobile", 5)
        spec = MobileRLSpec(prompts_per_step=ppstep, group_size=g,
                            history_alignment=HistoryAlignmentSpec(rollouts=r, epoch_size=0))
        ne = NavigationEpochs(steps, opener, spec, NullTracker())
        trainer = SimpleNamespace(env=DistEnv(0, 1, 0, torch.device("cpu"), "single"), model=None, processor=None,
                                  reward_fn=REWARDS.get(spec.reward), rollout_weights=contextlib.nullcontext)
        calls.clear()
        ne._pool_rollouts(trainer, r, epoch=0)  # type: ignore[arg-type]
        per_call = max(1, ppstep * g // r)
        assert [n for n, _, _ in calls] == [min(per_call, len(steps) - k) for k in range(0, len(steps), per_call)]
        assert all(rr == r for _, rr, _ in calls) and sum(n for n, _, _ in calls) == len(steps)
        seeds[(g, r, ppstep)] = [s for _, _, ss in calls for s in ss]
    assert len(set(map(tuple, seeds.values()))) == 1  # one seed per step, the same under every chunking
