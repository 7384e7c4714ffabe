"""The batch function of `venus serve`: chats + `Sampling` -> `Completion`s via transformers `generate`.

Why not `models.generation.generate`: a server owes its clients more than text — exact token counts
(`usage`), why each answer ended, the text each token added (streaming) and, for RL rollouts,
per-token log-probabilities. This runs the same `generate` call on the same inputs
(`generation.prepare_inputs`), so greedy answers are those of the in-process backend, but keeps the
token ids and can record logprobs.

Logprobs are recorded inside `generate` by a logits processor (`LogprobTap`), so nothing is
recomputed and memory stays bounded (one batch x vocabulary row, not one per step as
`output_scores` keeps). To see the distribution a token was actually drawn from, the server puts
the processors in its own order and `generate` gets neutral settings (no repetition penalty,
temperature 1, top-p 1, no top-k) so it adds none of its own:
- sampling: logit bias, repetition penalty, temperature, top-k, top-p, then the tap — the logprobs
  are those of the distribution that `generate` samples from (tokens top-k / top-p removed have
  -inf, reported as -9999.0 as vLLM does);
- greedy: the tap first, then the logit bias and the repetition penalty — the logprobs are the
  log-softmax of the model's raw logits (temperature 0 has no distribution of its own; this is what
  vLLM reports).
The same processors in the same order as `generate` builds them means the same tokens and, with a
seed, the same samples as requests without logprobs. Generation is not incremental: a streamed
reply is replayed token by token after the whole batch is decoded (`serve_responses`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    ProcessorMixin,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from venus_core.models.generation import prepare_inputs
from venus_core.models.serve_protocol import MAX_TOP_LOGPROBS, Sampling
from venus_core.models.serve_responses import Completion, TokenLogprob, TopLogprob
from venus_core.models.serve_tokens import TokenTexts

LOGPROB_FLOOR = -9999.0  # what vLLM reports for -inf (a token the sampler could not pick); JSON has no -inf


class LogitBias(LogitsProcessor):
    """OpenAI `logit_bias`: adds a fixed bias to some tokens' logits at every step (vLLM applies it
    before penalties and temperature, as here). -100 makes a token practically unsampleable."""

    def __init__(self, bias: Sequence[tuple[int, float]]) -> None:
        self.ids = torch.tensor([i for i, _ in bias], dtype=torch.long)
        self.values = torch.tensor([v for _, v in bias], dtype=torch.float32)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if len(self.ids) and int(self.ids.max()) >= scores.shape[-1]:
            raise ValueError(f"logit_bias names token id {int(self.ids.max())}, beyond the model's "
                             f"{scores.shape[-1]} logits")
        ids = self.ids.to(scores.device)
        out = scores.clone()
        out[:, ids] += self.values.to(scores.device, scores.dtype)
        return out  # type: ignore[return-value]


class LogprobTap(LogitsProcessor):
    """A pass-through logits processor that records, per step, the log-softmax of the scores it sees:
    the `k` best (ids, logprobs) at once, and the chosen token's logprob one step later (when the
    token shows up at the end of `input_ids`) or at `finish`. Holds one (batch, vocab) row at a time.
    """

    def __init__(self, k: int) -> None:
        self.k = k
        self._last: torch.Tensor | None = None
        self.chosen: list[torch.Tensor] = []
        self.top_values: list[torch.Tensor] = []
        self.top_ids: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._last is not None:
            self.chosen.append(self._last.gather(1, input_ids[:, -1:]).squeeze(1))
        logp = torch.log_softmax(scores.float(), dim=-1)
        self._last = logp
        if self.k:
            values, ids = logp.topk(min(self.k, logp.shape[-1]), dim=-1)
            self.top_values.append(values)
            self.top_ids.append(ids)
        return scores

    def finish(self, new_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(chosen logprobs, top values, top ids) for the `new_ids.shape[1]` steps generated, as
        (batch, steps[, k]) tensors on the CPU. Steps `generate` ran and then undid are dropped."""
        steps = new_ids.shape[1]
        if len(self.chosen) < steps and self._last is not None:
            self.chosen.append(self._last.gather(1, new_ids[:, -1:]).squeeze(1))
        self._last = None
        if len(self.chosen) < steps:
            raise RuntimeError(f"logprobs recorded for {len(self.chosen)} of {steps} generated tokens")
        chosen = torch.stack(self.chosen[:steps], dim=1).cpu()
        if not self.k:
            return chosen, None, None
        values = torch.stack(self.top_values[:steps], dim=1).cpu()
        ids = torch.stack(self.top_ids[:steps], dim=1).cpu()
        return chosen, values, ids


def logits_size(model: PreTrainedModel) -> int:
    """How many logits the model produces per step: the bound on token ids in `logit_bias`."""
    head = model.get_output_embeddings()
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.get_text_config().vocab_size)


def _eos_ids(model: PreTrainedModel, tokenizer: Any) -> set[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}


@torch.inference_mode()
def generate_ids(model: PreTrainedModel, processor: ProcessorMixin, chats: Sequence[Sequence[dict[str, Any]]],
                 s: Sampling) -> tuple[torch.Tensor, list[int], LogprobTap | None]:
    """(generated ids (batch, steps) on the CPU, padded after each row's end; prompt lengths;
    the tap holding logprobs when `s.logprobs`)."""
    inputs, prompt_lengths, pad_id = prepare_inputs(model, processor, chats)
    tap = LogprobTap(MAX_TOP_LOGPROBS) if s.logprobs else None
    greedy = s.temperature == 0
    chain = LogitsProcessorList()
    if tap is not None and greedy:
        chain.append(tap)
    if s.logit_bias:
        chain.append(LogitBias(s.logit_bias))
    if s.repetition_penalty != 1.0:
        chain.append(RepetitionPenaltyLogitsProcessor(penalty=float(s.repetition_penalty)))
    mode: dict[str, Any] = {"do_sample": False}
    if not greedy:
        mode = {"do_sample": True, "temperature": 1.0, "top_p": 1.0}
        if s.temperature != 1.0:
            chain.append(TemperatureLogitsWarper(float(s.temperature)))
        if s.top_k > 0:
            chain.append(TopKLogitsWarper(top_k=int(s.top_k)))
        if s.top_p < 1.0:
            chain.append(TopPLogitsWarper(top_p=float(s.top_p)))
        if tap is not None:
            chain.append(tap)
        if s.seed is not None:
            torch.manual_seed(s.seed)
    out = model.generate(**inputs, max_new_tokens=int(s.max_tokens), repetition_penalty=1.0, pad_token_id=pad_id,
                         top_k=None, logits_processor=chain, **mode)
    return out[:, inputs["input_ids"].shape[1]:].cpu(), prompt_lengths, tap


def _entries(texts: TokenTexts, ids: list[int], chosen: list[float], top_values: list[list[float]] | None,
             top_ids: list[list[int]] | None) -> tuple[TokenLogprob, ...]:
    def entry(token_id: int, logprob: float) -> TopLogprob:
        token, raw = texts.describe(token_id)
        return TopLogprob(token, raw, max(float(logprob), LOGPROB_FLOOR), int(token_id))

    out = []
    for t, token_id in enumerate(ids):
        top = () if top_values is None or top_ids is None else tuple(
            entry(i, v) for i, v in zip(top_ids[t], top_values[t]))
        out.append(TokenLogprob(entry(token_id, chosen[t]), top))
    return tuple(out)


def transformers_runner(model: PreTrainedModel, processor: ProcessorMixin
                        ) -> Callable[[list[list[dict[str, Any]]], Sampling], list[Completion]]:
    """The server's batch function: (chats, Sampling) -> one `Completion` per chat, in order.

    A row ends at its first end-of-sequence token (kept: it was generated, is counted and has a
    logprob; its text is ""), finish_reason "stop"; a row without one filled `max_tokens`: "length".
    """
    texts = TokenTexts(processor.tokenizer)  # type: ignore[attr-defined]
    eos = _eos_ids(model, processor.tokenizer)  # type: ignore[attr-defined]

    def run(chats: list[list[dict[str, Any]]], s: Sampling) -> list[Completion]:
        if not chats:
            return []
        new, prompt_lengths, tap = generate_ids(model, processor, chats, s)
        recorded = tap.finish(new) if tap is not None else None
        out = []
        for r, row in enumerate(new.tolist()):
            end = next((t + 1 for t, token in enumerate(row) if token in eos), None)
            ids = row if end is None else row[:end]
            _, pieces = texts.text_pieces(ids)
            logprobs = None
            if recorded is not None:
                chosen, values, top_ids = recorded
                logprobs = _entries(texts, ids, chosen[r, : len(ids)].tolist(),
                                    None if values is None else values[r, : len(ids)].tolist(),
                                    None if top_ids is None else top_ids[r, : len(ids)].tolist())
            out.append(Completion(pieces, "length" if end is None else "stop", prompt_lengths[r], logprobs))
        return out

    return run


__all__ = ["LOGPROB_FLOOR", "LogitBias", "LogprobTap", "generate_ids", "logits_size", "transformers_runner"]
