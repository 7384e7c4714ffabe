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

    monkeypatch.setattr(ck.torch, "save", boom)
    with pytest.raises(OSError, match="disk full"):
        ck.save_checkpoint(tmp_path, 2, net, opt, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no torn step-2, no temp left
    assert ck.latest_checkpoint(tmp_path) == first


def test_keeps_only_the_newest_checkpoints(tmp_path: Path) -> None:
    net, opt = _net()
    for s in range(1, 5):
        ck.save_checkpoint(tmp_path, s, net, opt, {}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["step-00000003", "step-00000004"]


def test_optimizer_state_is_loaded_without_unpickling_objects(tmp_path: Path) -> None:
    net, opt = _net()
    path = ck.save_checkpoint(tmp_path, 1, net, opt, {})

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("pwned",))

    torch.save({"state": Evil()}, path / "optimizer.pt")
    with pytest.raises(Exception, match="[Ww]eights only|weights_only|Unsupported"):
        ck.load_checkpoint(path, net, opt)


def test_dangling_pointer_and_missing_files_are_clear_errors(tmp_path: Path) -> None:
    net, opt = _net()
    path = ck.save_checkpoint(tmp_path, 1, net, opt, {})
    (path / "rng.pt").unlink()
    with pytest.raises(FileNotFoundError, match="rng.pt"):
        ck.load_checkpoint(path, net, opt)
    (tmp_path / "latest").write_text("step-00000009")
    with pytest.raises(FileNotFoundError, match="step-00000009"):
        ck.latest_checkpoint(tmp_path)
    assert json.loads((path / "state.json").read_text())["step"] == 1
