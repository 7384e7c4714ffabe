"""Merge methods: TIES, linear and task arithmetic, registered in MERGE_METHODS.

This module is the plugin (entry point `venus_core.plugins`): importing it registers
"ties", "linear" and "task_arithmetic". Each method combines one chunk of task vectors
tau_i = theta_i - theta_base (fp32, [M, n]; already trimmed when the method trims) into one
merged delta; the orchestrator (api.py) adds it to the base and rounds once to the output dtype.

TIES (Yadav et al. 2023): trim (trim.py), elect a sign per parameter, take the disjoint mean of
the task vectors that agree with it, scale by lambda. Departures / options:
- election "mass" (paper: sign of the sum of trimmed tau), "weighted_mass" (sum of w_i tau_i,
  mergekit's choice) or "count" (majority of signs);
- the disjoint mean is weighted, sum_agree w_i tau_i / sum_agree w_i, which is the paper's mean
  for equal weights (and mergekit's `normalize: true`); weights must be >= 0;
- a parameter whose elected mass is exactly 0 gets no update (zero_sign "none") or, as in
  mergekit, the positive sign ("positive"); the paper's code resolves it to a global majority.
Sums over models are taken in sorted order of the summands, so the result is bit-identical
whatever the order in which the models are given (floating-point addition is not associative).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from venus_core.config.registry import MERGE_METHODS

Election = Literal["mass", "weighted_mass", "count"]
ZeroSign = Literal["none", "positive"]


@dataclass(frozen=True)
class CombineOptions:
    lambda_: float = 1.0
    election: Election = "mass"
    zero_sign: ZeroSign = "none"


@dataclass(frozen=True)
class Combined:
    delta: torch.Tensor  # [n] fp32
    conflicts: int  # entries where kept task vectors disagree in sign
    touched: int  # entries where at least one kept task vector is non-zero


@dataclass(frozen=True)
class MergeMethod:
    """A registered merge method; `combine(taus [M, n], weights [M], options) -> Combined`."""

    name: str
    trims: bool
    uses_lambda: bool
    weights_sum_to_one: bool
    nonnegative_weights: bool
    combine: Callable[[torch.Tensor, torch.Tensor, CombineOptions], Combined]


def ordered_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over dim 0, bit-identical under any permutation of the rows."""
    m = x.shape[0]
    if m <= 2:
        return x.sum(0)
    if m > 8:
        return torch.sort(x, dim=0).values.sum(0)
    rows = list(x.unbind(0))
    for rnd in range(m):  # odd-even transposition sort: m rounds sort m rows
        for i in range(rnd % 2, m - 1, 2):
            rows[i], rows[i + 1] = torch.minimum(rows[i], rows[i + 1]), torch.maximum(rows[i], rows[i + 1])
    acc = rows[0] + rows[1]
    for r in rows[2:]:
        acc += r
    return acc


def _sign_stats(taus: torch.Tensor) -> tuple[int, int]:
    """(entries where kept task vectors disagree in sign, entries where any is non-zero).

    Float arithmetic only: u = sign(max), v = sign(min) with u >= v; a conflict is u - v == 2,
    an untouched entry is u == v == 0.
    """
    u = torch.sign(taus.amax(0))
    v = torch.sign(taus.amin(0))
    touched = torch.maximum(u, v.neg()).sum()
    conflicts = torch.relu_(u.sub_(v).sub_(1.0)).sum()
    return int(conflicts), int(touched)


def ties_combine(taus: torch.Tensor, weights: torch.Tensor, opt: CombineOptions) -> Combined:
    """Elect a sign per entry and average the agreeing (trimmed) task vectors.

    Written with float arithmetic only (no bool masks, no `where`: both cost several times more
    on CPU). With s the elected sign (+1, -1 or 0), relu(tau * s) * s is tau where it agrees
    with s and 0 elsewhere, exactly (multiplying by +-1 is exact); sign(relu(tau * s)) is the
    agreement indicator. A zero elected mass may give s = copysign(1, -0.0) = -1 where the
    `positive` rule says +1, but then every summand is zero and no entry agrees either way.
    """
    conflicts, touched = _sign_stats(taus)
    w = weights.view(-1, *([1] * (taus.dim() - 1)))
    unit = bool((weights == 1.0).all())  # w * tau == tau exactly: skip the [M, n] products
    if opt.election == "mass":
        score = ordered_sum(taus)
    elif opt.election == "weighted_mass":
        score = ordered_sum(taus if unit else taus * w)
    elif opt.election == "count":
        score = torch.sign(taus).sum(0)  # small integers: exact in any order
    else:
        raise ValueError(f"unknown sign election {opt.election!r}")
    if opt.zero_sign == "positive":
        elected = torch.copysign(torch.ones((), dtype=torch.float32), score)
    else:
        elected = torch.sign(score)
    del score
    agreeing = torch.relu_(taus * elected)  # |tau| where tau agrees with the elected sign, else 0
    indicator = torch.sign(agreeing)  # 1 where it agrees, else 0
    agreeing.mul_(elected)  # the agreeing tau themselves
    if unit:
        num = ordered_sum(agreeing)
        den = indicator[0].clone()  # counts: exact in any order
        for row in indicator[1:]:
            den.add_(row)
    else:
        num = ordered_sum(agreeing.mul_(w))
        den = ordered_sum(indicator.mul_(w))
    del agreeing, indicator, elected
    # den is 0 (no agreeing model with weight > 0) or at least the smallest positive weight
    positive = weights[weights > 0]
    floor = float(positive.min()) if positive.numel() else 1.0
    delta = num.div_(den.clamp_min_(floor)).add_(0.0)  # + 0.0: a zero delta is +0.0
    if opt.lambda_ != 1.0:
        delta.mul_(opt.lambda_)
    return Combined(delta, conflicts, touched)


def task_arithmetic_combine(taus: torch.Tensor, weights: torch.Tensor, opt: CombineOptions) -> Combined:
    """theta_base + lambda * sum_i w_i tau_i."""
    conflicts, touched = _sign_stats(taus)
    delta = ordered_sum(taus * weights.view(-1, *([1] * (taus.dim() - 1))))
    if opt.lambda_ != 1.0:
        delta.mul_(opt.lambda_)
    return Combined(delta, conflicts, touched)


def linear_combine(taus: torch.Tensor, weights: torch.Tensor, opt: CombineOptions) -> Combined:
    """sum_i w_i theta_i with sum_i w_i = 1, computed as theta_base + sum_i w_i tau_i."""
    conflicts, touched = _sign_stats(taus)
    delta = ordered_sum(taus * weights.view(-1, *([1] * (taus.dim() - 1))))
    return Combined(delta, conflicts, touched)


TIES = MERGE_METHODS.register(
    "ties",
    MergeMethod("ties", True, True, False, True, ties_combine),
    description="TIES merging: trim task vectors, elect signs, disjoint mean (Yadav et al. 2023)",
)
LINEAR = MERGE_METHODS.register(
    "linear",
    MergeMethod("linear", False, False, True, False, linear_combine),
    description="weighted average of the models, weights summing to 1",
)
TASK_ARITHMETIC = MERGE_METHODS.register(
    "task_arithmetic",
    MergeMethod("task_arithmetic", False, True, False, False, task_arithmetic_combine),
    description="task arithmetic: base + lambda * sum_i w_i (theta_i - base)",
)
