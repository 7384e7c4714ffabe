from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from venus_core.config.spec import MixtureSpec, ModelSpec
from venus_core.config.training import MidTrainSpec
from venus_core.models.batches import IGNORE_INDEX, collate
from venus_core.models.loading import load_model
from venus_core.train.data import is_held_out, load_corpus
from venus_core.train.distributed import DistEnv
from venus_core.train.sft import freeze_vision, train_sft
from venus_core.train.tracker import MemoryTracker

CPU = DistEnv(0, 1, 0, torch.device("cpu"), "single")
GROUNDING = MixtureSpec(perception=0, vqa=0, grounding=1, navigation=0)


def _cfg(**kw: object) -> MidTrainSpec:
    base = dict(max_steps=6, batch_size=4, lr=2e-3, warmup_steps=2, save_every=3, eval_every=100, seed=1)
    return MidTrainSpec(**(base | kw))


def test_loss_is_the_cross_entropy_of_the_answer_tokens_only(train_tiny_dir: Path, grounding_l0: Path) -> None:
    model, proc = load_model(train_tiny_dir, ModelSpec())
    corpus = load_corpus([grounding_l0], validation_fraction=0.0, history_len=5, seed=0)
    examples = [it.example() for it in corpus.train["grounding"][:3]]
    batch = collate(examples, proc)
    tok = proc.tokenizer
    for row, ex in zip(batch["labels"], examples):
        learned = [int(t) for t in row if t != IGNORE_INDEX]
        assert learned == tok(ex.target + "<|im_end|>", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        out = model(**batch)
    logits = out.logits[:, :-1].reshape(-1, out.logits.shape[-1]).float()
    target = batch["labels"][:, 1:].reshape(-1)
    manual = F.cross_entropy(logits, target, ignore_index=IGNORE_INDEX)
    assert torch.allclose(out.loss, manual, atol=1e-5)
    # Changing only prompt tokens' labels to something else would change the loss: the mask matters.
    unmasked = batch["input_ids"][:, 1:].reshape(-1)
    assert not torch.allclose(F.cross_entropy(logits, unmasked), manual)


def test_held_out_split_never_cuts_an_episode(mixture_l2: Path) -> None:
    corpus = load_corpus([mixture_l2], validation_fraction=0.5, history_len=2, seed=3)
    train_eps = {it.record.episode_id for it in corpus.train.get("navigation", [])}  # type: ignore[union-attr]
    held_eps = {it.record.episode_id for it in corpus.held_out.get("navigation", [])}  # type: ignore[union-attr]
    assert train_eps and not (train_eps & held_eps)
    assert is_held_out("k", 0.0, 0) is False and is_held_out("k", 0.999999, 0) is True


def _run(tiny: Path, data: Path, ckpt: Path, *, stop_at: int | None = None, resume: bool = False, **kw: object) -> tuple[torch.nn.Module, object]:
    model, proc = load_model(tiny, ModelSpec())
    corpus = load_corpus([data], validation_fraction=0.1, history_len=5, seed=0)
    tracker = MemoryTracker()
    res = train_sft(model, proc, corpus, GROUNDING, _cfg(**kw), CPU, ckpt_dir=ckpt, tracker=tracker,
                    resume=resume, stop_at=stop_at, eval_limit=2)
    return model, (res, tracker)


def test_resume_after_a_stop_reaches_bit_identical_weights(train_tiny_dir: Path, grounding_l0: Path, tmp_path: Path) -> None:
    straight, (res, tracker) = _run(train_tiny_dir, grounding_l0, tmp_path / "a")
    assert res.steps == 6 and res.mixture["drawn"] == {"grounding": 24}
    assert [s for s, _ in tracker.series("train/lr")] == [6] and "eval/grounding/parse" in tracker.metrics[-1][1]
    stopped, (res_b, _) = _run(train_tiny_dir, grounding_l0, tmp_path / "b", stop_at=3)
    assert res_b.steps == 3
    resumed, (res_c, _) = _run(train_tiny_dir, grounding_l0, tmp_path / "b", resume=True)
    assert res_c.steps == 6 and res_c.mixture == res.mixture
    a, c = straight.state_dict(), resumed.state_dict()
    assert a.keys() == c.keys() and all(torch.equal(a[k], c[k]) for k in a)
    s = stopped.state_dict()
    assert not all(torch.equal(a[k], s[k]) for k in a)  # the stopped run really was behind


def test_frozen_vision_tower_does_not_move(train_tiny_dir: Path, grounding_l0: Path, tmp_path: Path) -> None:
    model, proc = load_model(train_tiny_dir, ModelSpec())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    corpus = load_corpus([grounding_l0], validation_fraction=0.0, history_len=5, seed=0)
    train_sft(model, proc, corpus, GROUNDING, _cfg(max_steps=2, freeze_vision=True), CPU, ckpt_dir=tmp_path)
    after = model.state_dict()
    vis = [k for k in after if ".visual." in f".{k}"]
    assert vis and all(torch.equal(before[k], after[k]) for k in vis)
    assert any(not torch.equal(before[k], after[k]) for k in after if k not in vis)
    with pytest.raises(ValueError, match="visual"):
        freeze_vision(torch.nn.Linear(2, 2))


def test_too_long_samples_are_skipped_and_counted(train_tiny_dir: Path, mixture_l2: Path, tmp_path: Path) -> None:
    model, proc = load_model(train_tiny_dir, ModelSpec())
    corpus = load_corpus([mixture_l2], validation_fraction=0.0, history_len=5, seed=0)
    tracker = MemoryTracker()
    res = train_sft(model, proc, corpus, MixtureSpec(), _cfg(max_steps=1, batch_size=8, max_seq_len=300), CPU,
                    ckpt_dir=tmp_path, tracker=tracker)
    navigation = res.mixture["drawn"]["navigation"]  # ~1 000-token prompts: all over 300
    assert navigation > 0 and res.skipped_too_long == navigation
    assert tracker.series("train/skipped_too_long") == [(1, float(navigation))]
