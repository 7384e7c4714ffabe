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
"button") get no mass and the distinguishing words get it all. With `ngram` > 1 the units are the
query's token n-grams of lengths 1..ngram: a sub-word tokenizer splits words into pieces that other
words share ("green" and "gray" both start with "g"), and the n-grams that span a word tell them apart.

Departure: UI-Venus-1.5 starts from a pre-trained Qwen3-VL that already binds instructions to
elements; nothing like this head is in the reports. It stands in for that pre-training at toy
scale, and is off by default in the cluster specs (`mid_train.instruction_head.weight: 0`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import torch
from torch import nn

from venus_core.config.training import InstructionHeadSpec

IGNORE_INDEX = -100


def ngrams(ids: Sequence[int], n: int) -> set[tuple[int, ...]]:
    """The distinct token n-grams of lengths 1..n of `ids`."""
    return {tuple(ids[i:i + k]) for k in range(1, n + 1) for i in range(len(ids) - k + 1)}


class InstructionHead(nn.Module):
    """Linear head over a compact vocabulary (the query n-grams of a corpus), with per-unit weights."""

    def __init__(self, hidden_size: int, vocab: list[tuple[int, ...]], weights: list[float],
                 spec: InstructionHeadSpec) -> None:
        super().__init__()
        if len(vocab) != len(weights) or not vocab:
            raise ValueError(f"instruction head: {len(vocab)} vocabulary units but {len(weights)} weights")
        if any(len(g) > spec.ngram for g in vocab):
            raise ValueError(f"instruction head: a vocabulary unit is longer than ngram={spec.ngram}")
        self.spec = spec
        self.proj = nn.Linear(hidden_size, len(vocab))
        self.lookup = {g: i for i, g in enumerate(vocab)}
        self.weights = list(weights)

    def targets(self, query_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows, V) target distributions and a (rows,) mask of rows that have one (a query made only
        of units every query shares, or of units outside the vocabulary, has none). `query_ids` rows
        are padded with -1 at the end."""
        dist = torch.zeros(query_ids.shape[0], len(self.weights))
        for r, row in enumerate(query_ids.tolist()):
            ids = [t for t in row if t >= 0]
            # a set: a repeated unit counts once; an unknown one changes nothing
            for g in ngrams(ids, self.spec.ngram):
                i = self.lookup.get(g)
                if i is not None:
                    dist[r, i] = self.weights[i]
        total = dist.sum(dim=1, keepdim=True)
        has = total.squeeze(1) > 0
        return (dist / total.clamp_min(1e-12)).to(query_ids.device), has.to(query_ids.device)

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


def query_vocabulary(queries: Iterable[list[int]], spec: InstructionHeadSpec) -> tuple[list[tuple[int, ...]], list[float]]:
    """(units, weights) of the head from the token lists of a stage's training queries: the
    `max_vocab` most frequent token n-grams of lengths 1..`spec.ngram`; weight = log(N / df) ("idf")
    or 1 ("uniform")."""
    df: Counter[tuple[int, ...]] = Counter()
    n = 0
    for q in queries:
        n += 1
        df.update(ngrams(q, spec.ngram))
    if not df:
        raise ValueError("instruction head: the corpus has no query text to predict (every record's query is empty)")
    vocab = sorted(g for g, _ in df.most_common(spec.max_vocab))
    if spec.weighting == "uniform":
        return vocab, [1.0] * len(vocab)
    return vocab, [math.log(n / df[g]) for g in vocab]


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


__all__ = ["InstructionHead", "build_instruction_head", "ngrams", "query_vocabulary"]
