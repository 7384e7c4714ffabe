"""Instruction head: an auxiliary loss that makes the answer positions say what the instruction asked.

Why (measured, docs/learning.md "The query side is the missing half"): the tiny model trained on
"click the <colour> button" boards stayed at the random-button level for thousands of steps. Probes
showed the keys (visual tokens) carry colour and place, and a linear probe reads the asked colour
at the answer positions, yet no attention fitted on those positions finds the target (held-out mass
0.19 with 9 colours; 0.98 once the query is replaced by a clean code of the asked colour). The
answer positions' representation of *which* element was asked is what gradient through the answer
alone does not shape. This head supplies that signal: a linear map from the hidden state that
predicts the answer tokens (`layer`, default the last decoder layer's input) to the tokens of the
instruction, trained with cross-entropy against a soft target over the instruction's tokens and
discarded after training. It knows nothing of colours or labels: the target is the record's query
text (`models.batches.query_text`), each distinct token weighted by its inverse document frequency
over the stage's training queries, so template words every instruction shares ("Click", "the",
"button") get no mass and the distinguishing words get it all.

Departure: UI-Venus-1.5 starts from a pre-trained Qwen3-VL that already binds instructions to
elements; nothing like this head is in the reports. It stands in for that pre-training at toy
scale, and is off by default in the cluster specs (`mid_train.instruction_head.weight: 0`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

import torch
from torch import nn

from venus_core.config.training import InstructionHeadSpec

IGNORE_INDEX = -100


class InstructionHead(nn.Module):
    """Linear head over a compact vocabulary (the query tokens of a corpus), with per-token weights."""

    def __init__(self, hidden_size: int, vocab: list[int], weights: list[float], spec: InstructionHeadSpec) -> None:
        super().__init__()
        if len(vocab) != len(weights) or not vocab:
            raise ValueError(f"instruction head: {len(vocab)} vocabulary tokens but {len(weights)} weights")
        self.spec = spec
        self.proj = nn.Linear(hidden_size, len(vocab))
        index = torch.full((max(vocab) + 1,), -1, dtype=torch.long)
        index[torch.tensor(vocab, dtype=torch.long)] = torch.arange(len(vocab))
        self.register_buffer("index", index, persistent=False)  # token id -> output, -1 = not in the vocabulary
        self.register_buffer("token_weight", torch.tensor(weights, dtype=torch.float32), persistent=False)

    def targets(self, query_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows, V) target distributions and a (rows,) mask of rows that have one (a query made only
        of tokens every query shares, or of tokens outside the vocabulary, has none)."""
        ids = query_ids.clamp_min(0)
        known = (query_ids >= 0) & (ids < self.index.numel())
        out = self.index[ids.clamp_max(self.index.numel() - 1)]
        known &= out >= 0
        dist = torch.zeros(query_ids.shape[0], self.token_weight.numel(), device=query_ids.device)
        w = torch.where(known, self.token_weight[out.clamp_min(0)], torch.zeros((), device=query_ids.device))
        # max, not add: a repeated token counts once, and an unknown one (weight 0 at output 0) changes nothing
        dist.scatter_reduce_(1, out.clamp_min(0), w, reduce="amax", include_self=True)
        total = dist.sum(dim=1, keepdim=True)
        has = total.squeeze(1) > 0
        return dist / total.clamp_min(1e-12), has

    def loss(self, hidden_states: tuple[torch.Tensor, ...], labels: torch.Tensor,
             query_ids: torch.Tensor) -> torch.Tensor | None:
        """Mean soft-target cross-entropy over the positions that predict answer tokens, of the rows
        that have a target; None when no row has one."""
        hs = hidden_states[self.spec.layer]
        target, has = self.targets(query_ids.to(hs.device))
        # position p predicts token p + 1: the answer tokens' predecessors
        predicts = torch.zeros_like(labels, dtype=torch.bool)
        predicts[:, :-1] = labels[:, 1:] != IGNORE_INDEX
        predicts &= has.to(labels.device)[:, None]
        rows, cols = predicts.nonzero(as_tuple=True)
        if rows.numel() == 0:
            return None
        logits = self.proj(hs[rows, cols].to(self.proj.weight.dtype))
        per_pos = -(torch.log_softmax(logits.float(), dim=-1) * target[rows]).sum(dim=-1)
        # each row weighs the same whatever its answer length
        counts = torch.bincount(rows, minlength=labels.shape[0]).clamp_min(1).float()
        per_row = torch.zeros(labels.shape[0], device=per_pos.device).index_add_(0, rows, per_pos) / counts
        return per_row[has.to(per_row.device)].mean()


def query_vocabulary(queries: Iterable[list[int]], spec: InstructionHeadSpec) -> tuple[list[int], list[float]]:
    """(token ids, weights) of the head from the token lists of a stage's training queries: the
    `max_vocab` most frequent tokens; weight = log(N / df) ("idf") or 1 ("uniform")."""
    df: Counter[int] = Counter()
    n = 0
    for q in queries:
        n += 1
        df.update(set(q))
    if not df:
        raise ValueError("instruction head: the corpus has no query text to predict (every record's query is empty)")
    vocab = sorted(t for t, _ in df.most_common(spec.max_vocab))
    if spec.weighting == "uniform":
        return vocab, [1.0] * len(vocab)
    return vocab, [math.log(n / df[t]) for t in vocab]


def build_instruction_head(model: nn.Module, processor: object, queries: Iterable[str],
                           spec: InstructionHeadSpec) -> InstructionHead:
    """The head for `model` (its text hidden size), over the query tokens of `queries`; on the
    model's device. Raises if every query token is shared by all queries (nothing to learn)."""
    tok = processor.tokenizer  # type: ignore[attr-defined]
    token_lists = [list(tok(q, add_special_tokens=False)["input_ids"]) for q in queries if q]
    vocab, weights = query_vocabulary(token_lists, spec)
    if max(weights) <= 0:
        raise ValueError("instruction head: every query token occurs in every query (idf 0): the queries do not "
                         "distinguish anything; use weighting=uniform or turn the head off")
    cfg = getattr(model, "config", None)
    text = getattr(cfg, "text_config", cfg)
    hidden = int(getattr(text, "hidden_size"))
    device = next(model.parameters()).device
    return InstructionHead(hidden, vocab, weights, spec).to(device)


__all__ = ["InstructionHead", "build_instruction_head", "query_vocabulary"]
