"""The instruction head (venus_core.train.instruction_head): targets, loss, training, resume, checkpoints."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from venus_core.config.spec import MixtureSpec, ModelSpec
from venus_core.config.training import InstructionHeadSpec, MidTrainSpec
from venus_core.models.batches import Example, collate
from venus_core.models.loading import load_model
from venus_core.train.buckets import split_batch
from venus_core.train.data import load_corpus
from venus_core.train.distributed import DistEnv
from venus_core.train.instruction_head import InstructionHead, build_instruction_head, query_vocabulary
from venus_core.train.sft import train_sft
from venus_core.train.tracker import MemoryTracker

CPU = DistEnv(0, 1, 0, torch.device("cpu"), "single")
GROUNDING = MixtureSpec(perception=0, vqa=0, grounding=1, navigation=0)


def test_idf_gives_shared_tokens_no_mass_and_distinguishing_tokens_all() -> None:
    spec = InstructionHeadSpec(weight=1.0, ngram=1)
    queries = [[1, 2, 10], [1, 2, 11], [1, 2, 12], [1, 2, 10, 10]]
    vocab, weights = query_vocabulary(queries, spec)
    assert vocab == [(1,), (2,), (10,), (11,), (12,)]
    w = dict(zip(vocab, weights))
    assert w[(1,)] == w[(2,)] == 0.0
    assert math.isclose(w[(10,)], math.log(4 / 2)) and math.isclose(w[(11,)], math.log(4))
    head = InstructionHead(8, vocab, weights, spec)
    target, has = head.targets(torch.tensor([[1, 2, 10, 10], [1, 2, -1, -1], [1, 99, 11, -1], [3, -1, -1, -1]]))
    assert has.tolist() == [True, False, True, False]  # only shared tokens / only unknown tokens: no target
    assert torch.allclose(target[0], torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0]))  # the repeated token counts once
    assert torch.allclose(target[2], torch.tensor([0.0, 0.0, 0.0, 1.0, 0.0]))  # an unknown token (99) changes nothing
    uniform = InstructionHead(8, vocab, query_vocabulary(queries, InstructionHeadSpec(weighting="uniform", ngram=1))[1], spec)
    t, _ = uniform.targets(torch.tensor([[1, 2, 10, -1]]))
    assert torch.allclose(t[0], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0, 0.0]))


def test_max_vocab_keeps_the_most_frequent_tokens() -> None:
    vocab, _ = query_vocabulary([[1, 2], [1, 3], [1, 2]], InstructionHeadSpec(max_vocab=2, ngram=1))
    assert vocab == [(1,), (2,)]


def test_ngrams_tell_apart_words_that_share_pieces() -> None:
    """"green" = g+reen and "gray" = g+ra+y share the piece g: as unigrams both targets put mass on
    it; with bigrams the units that span the word are each query's own."""
    green, gray = [1, 2, 7, 8], [1, 2, 7, 9, 10]  # "click the" + word pieces
    queries = [green, gray, [1, 2, 11]]
    uni = InstructionHead(8, *query_vocabulary(queries, InstructionHeadSpec(ngram=1)), InstructionHeadSpec(ngram=1))
    t_uni, _ = uni.targets(torch.tensor([green + [-1], gray]))
    shared = uni.lookup[(7,)]
    assert t_uni[0, shared] > 0 and t_uni[1, shared] > 0
    spec = InstructionHeadSpec(ngram=2)
    vocab, weights = query_vocabulary(queries, spec)
    assert (1, 2) in vocab and (2, 7) in vocab and (7, 8) in vocab and (7, 9, 10) not in vocab
    head = InstructionHead(8, vocab, weights, spec)
    t, has = head.targets(torch.tensor([green + [-1], gray]))
    assert has.all()
    assert t[0, head.lookup[(1, 2)]] == 0  # in every query: no mass
    assert t[0, head.lookup[(7, 8)]] > t[0, head.lookup[(7,)]] > 0  # idf 3 vs 3/2
    assert t[1, head.lookup[(7, 8)]] == 0 and t[1, head.lookup[(7, 9)]] > 0
    # the two targets overlap only on the shared pieces
    assert float((t[0] * t[1]).sum()) < float((t_uni[0] * t_uni[1]).sum())
    with pytest.raises(ValueError, match="longer than ngram"):
        InstructionHead(8, vocab, weights, InstructionHeadSpec(ngram=1))


def test_nothing_to_predict_is_an_error(train_tiny_dir: Path) -> None:
    model, proc = load_model(train_tiny_dir, ModelSpec())
    with pytest.raises(ValueError, match="no query text"):
        build_instruction_head(model, proc, ["", ""], InstructionHeadSpec(weight=1.0))
    with pytest.raises(ValueError, match="idf 0"):
        build_instruction_head(model, proc, ["click it", "click it"], InstructionHeadSpec(weight=1.0))


def test_loss_reads_the_answer_predicting_positions_only(train_tiny_dir: Path, grounding_l0: Path) -> None:
    """The loss equals a hand computation at the positions before answer tokens, and prompt-side
    hidden states do not reach it."""
    model, proc = load_model(train_tiny_dir, ModelSpec())
    corpus = load_corpus([grounding_l0], validation_fraction=0.0, history_len=5, seed=0)
    examples = [it.example() for it in corpus.train["grounding"][:3]]
    assert all(ex.query and ex.query in str(ex.messages) for ex in examples)
    head = build_instruction_head(model, proc, [ex.query for ex in examples] + ["x"], InstructionHeadSpec(weight=1.0))
    batch = collate(examples, proc, with_query=True)
    query_ids = batch.pop("query_ids")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
        got = head.loss(out.hidden_states, batch["labels"], query_ids)
        target, has = head.targets(query_ids)
        hs = out.hidden_states[-2]
        rows = []
        for b in range(3):
            pos = [p for p in range(batch["labels"].shape[1] - 1) if batch["labels"][b, p + 1] != -100]
            logp = torch.log_softmax(head.proj(hs[b, pos]), -1)
            rows.append(-(logp * target[b]).sum(-1).mean())
        assert has.all()
        assert got is not None and torch.allclose(got, torch.stack(rows).mean(), atol=1e-6)
        # changing a prompt-side hidden state (not a predecessor of an answer token) does not change it
        first_answer = int((batch["labels"][0] != -100).nonzero()[0])
        moved = list(out.hidden_states)
        moved[-2] = hs.clone()
        moved[-2][0, : first_answer - 1] += 5.0
        assert torch.allclose(head.loss(tuple(moved), batch["labels"], query_ids), got)
        moved[-2][0, first_answer - 1] += 5.0
        assert not torch.allclose(head.loss(tuple(moved), batch["labels"], query_ids), got)


def test_length_groups_carry_the_query_rows(train_tiny_dir: Path, grounding_l0: Path) -> None:
    _, proc = load_model(train_tiny_dir, ModelSpec())
    corpus = load_corpus([grounding_l0], validation_fraction=0.0, history_len=5, seed=0)
    examples = [it.example() for it in corpus.train["grounding"][:4]]
    examples.append(Example(examples[0].messages, examples[0].target + " " * 400, "long", "a much longer query"))
    batch = collate(examples, proc, with_query=True)
    vs = int(proc.tokenizer.convert_tokens_to_ids("<|vision_start|>"))
    seen = []
    for sub, _ in split_batch(batch, vs, 1.5):
        for row_ids, row_q in zip(sub["input_ids"], sub["query_ids"]):
            i = next(k for k in range(len(examples)) if torch.equal(batch["input_ids"][k, : row_ids.numel()], row_ids))
            assert torch.equal(row_q, batch["query_ids"][i])
            seen.append(i)
    assert sorted(seen) == list(range(len(examples)))


def _cfg(**kw: object) -> MidTrainSpec:
    base = dict(max_steps=6, batch_size=4, lr=2e-3, warmup_steps=2, save_every=3, eval_every=100, seed=1,
                instruction_head=InstructionHeadSpec(weight=1.0))
    return MidTrainSpec(**(base | kw))


def _run(tiny: Path, data: Path, ckpt: Path, **kw: object) -> tuple[torch.nn.Module, MemoryTracker]:
    stop_at = kw.pop("stop_at", None)
    resume = bool(kw.pop("resume", False))
    model, proc = load_model(tiny, ModelSpec())
    corpus = load_corpus([data], validation_fraction=0.1, history_len=5, seed=0)
    tracker = MemoryTracker()
    train_sft(model, proc, corpus, GROUNDING, _cfg(**kw), CPU, ckpt_dir=ckpt, tracker=tracker,
              resume=resume, stop_at=stop_at, eval_limit=2)  # type: ignore[arg-type]
    return model, tracker


def test_training_with_the_head_logs_it_resumes_exactly_and_never_saves_it_in_the_model(
        train_tiny_dir: Path, grounding_l0: Path, tmp_path: Path) -> None:
    plain, _ = _run(train_tiny_dir, grounding_l0, tmp_path / "plain", instruction_head=InstructionHeadSpec())
    straight, tracker = _run(train_tiny_dir, grounding_l0, tmp_path / "a")
    losses = [v for _, v in tracker.series("train/instruction_head_loss")]
    assert losses and all(math.isfinite(v) and v > 0 for v in losses)
    a, p = straight.state_dict(), plain.state_dict()
    assert a.keys() == p.keys()  # the head is not part of the model
    assert not all(torch.equal(a[k], p[k]) for k in a)  # its gradient reached the model
    ckpt = sorted((tmp_path / "a").glob("step-*"))[-1]
    with safe_open(str(ckpt / "model.safetensors"), "pt") as f:
        assert not any("instruction" in k or k.startswith("proj") for k in f.keys())
    assert (ckpt / "instruction_head.safetensors").is_file()
    _run(train_tiny_dir, grounding_l0, tmp_path / "b", stop_at=3)
    resumed, _ = _run(train_tiny_dir, grounding_l0, tmp_path / "b", resume=True)
    c = resumed.state_dict()
    assert all(torch.equal(a[k], c[k]) for k in a)


def test_deepspeed_backend_refuses_the_head(train_tiny_dir: Path, grounding_l0: Path, tmp_path: Path) -> None:
    model, proc = load_model(train_tiny_dir, ModelSpec())
    corpus = load_corpus([grounding_l0], validation_fraction=0.1, history_len=5, seed=0)
    env = DistEnv(0, 1, 0, torch.device("cpu"), "deepspeed")
    with pytest.raises(ValueError, match="instruction_head is not supported with distributed.backend=deepspeed"):
        train_sft(model, proc, corpus, GROUNDING, _cfg(), env, ckpt_dir=tmp_path / "ds")
