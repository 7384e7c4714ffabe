from __future__ import annotations

import math

import pytest
import torch

from venus_core.train.schedule import cosine_with_warmup, lr_factor


def test_warmup_is_linear_then_cosine_to_the_floor() -> None:
    w, total, floor = 10, 110, 0.1
    assert [lr_factor(s, w, total, floor) for s in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert lr_factor(w, w, total, floor) == pytest.approx(1.0)
    mid = w + (total - 1 - w) / 2
    assert lr_factor(int(mid), w, total, floor) == pytest.approx(floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * (int(mid) - w) / (total - 1 - w))))
    assert lr_factor(total - 1, w, total, floor) == pytest.approx(floor)
    assert lr_factor(total + 50, w, total, floor) == pytest.approx(floor)
    values = [lr_factor(s, w, total, floor) for s in range(w, total)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_no_warmup_and_bad_arguments() -> None:
    assert lr_factor(0, 0, 50, 0.0) == pytest.approx(1.0)
    assert lr_factor(49, 0, 50, 0.0) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError):
        lr_factor(-1, 0, 10, 0.1)
    with pytest.raises(ValueError):
        lr_factor(0, 0, 10, 1.5)


def test_scheduler_drives_the_optimizer() -> None:
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=2e-3)
    sched = cosine_with_warmup(opt, 4, 20, 0.1)
    lrs = []
    for _ in range(20):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(2e-3 / 4) and lrs[3] == pytest.approx(2e-3) and lrs[-1] == pytest.approx(2e-4)
