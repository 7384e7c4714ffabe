from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from venus_core.train import checkpoint as ck


def _net() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2, betas=(0.9, 0.98))
    net(torch.randn(3, 4)).sum().backward()
    opt.step()
    return net, opt


def test_roundtrip_restores_weights_optimizer_rng_and_state(tmp_path: Path) -> None:
    net, opt = _net()
    random.seed(5)
    np.random.seed(6)
    torch.manual_seed(7)
    path = ck.save_checkpoint(tmp_path, 3, net, opt, {"sampler": {"batches": 3}})
    expect = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    assert ck.latest_checkpoint(tmp_path) == path and path.name == "step-00000003"

    other, other_opt = _net()
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    random.seed(99)
    state = ck.load_checkpoint(path, other, other_opt)
    assert state["step"] == 3 and state["sampler"] == {"batches": 3}
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expect
    for a, b in zip(net.state_dict().values(), other.state_dict().values()):
        assert torch.equal(a, b)
    assert other_opt.state_dict()["state"][0]["exp_avg"].equal(opt.state_dict()["state"][0]["exp_avg"])


def test_failed_save_leaves_the_previous_checkpoint_untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    net, opt = _net()
    first = ck.save_checkpoint(tmp_path, 1, net, opt, {})
    before = sorted(p.name for p in tmp_path.iterdir())

    def boom(*a: object, **k: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(ck, "save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        ck.save_checkpoint(tmp_path, 2, net, opt, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no torn step-2, no temp left
    assert ck.latest_checkpoint(tmp_path) == first


def test_keeps_only_the_newest_checkpoints(tmp_path: Path) -> None:
    net, opt = _net()
    for s in range(1, 5):
        ck.save_checkpoint(tmp_path, s, net, opt, {}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["step-00000003", "step-00000004"]


def test_a_checkpoint_holds_no_pickle_and_a_pickle_is_refused_unread(tmp_path: Path) -> None:
    net, opt = _net()
    path = ck.save_checkpoint(tmp_path, 1, net, opt, {})
    assert sorted(p.name for p in path.iterdir()) == sorted((*ck.FILES, "SHA256SUMS"))

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (Path(tmp_path / "pwned").touch, ())

    torch.save({"state": Evil()}, path / "optimizer.pt")  # the earlier format's name
    with pytest.raises(ValueError, match=r"optimizer\.pt: pickle file refused"):
        ck.load_checkpoint(path, net, opt)
    assert not (tmp_path / "pwned").exists()


def test_optimizer_state_round_trips_its_types(tmp_path: Path) -> None:
    net, opt = _net()
    path = ck.save_checkpoint(tmp_path, 1, net, opt, {})
    _, other_opt = _net()
    ck.load_checkpoint(path, _net()[0], other_opt)
    a, b = opt.state_dict(), other_opt.state_dict()
    assert a["param_groups"] == b["param_groups"] and isinstance(b["param_groups"][0]["betas"], tuple)
    for pid, st in a["state"].items():
        assert set(st) == set(b["state"][pid])
        for name, v in st.items():
            assert torch.equal(v, b["state"][pid][name]) and v.dtype == b["state"][pid][name].dtype


def test_dangling_pointer_and_missing_files_are_clear_errors(tmp_path: Path) -> None:
    net, opt = _net()
    path = ck.save_checkpoint(tmp_path, 1, net, opt, {})
    (path / "rng.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="rng.safetensors"):
        ck.load_checkpoint(path, net, opt)
    (tmp_path / "latest").write_text("step-00000009")
    with pytest.raises(FileNotFoundError, match="step-00000009"):
        ck.latest_checkpoint(tmp_path)
    assert json.loads((path / "state.json").read_text())["step"] == 1
