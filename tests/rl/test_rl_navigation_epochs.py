"""Navigation GRPO epochs as slices (`history_alignment.epoch_size`): a run shorter than one pass over
its data still reaches an epoch boundary, where history alignment and the sparse variants happen."""

from __future__ import annotations

from pathlib import Path

import pytest

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
