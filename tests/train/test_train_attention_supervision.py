"""Attention supervision (venus_core.train.attention_supervision): targets, loss, training."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from venus_core.config.spec import MixtureSpec, ModelSpec
from venus_core.config.training import AttentionSupervisionSpec, MidTrainSpec
from venus_core.models.batches import collate
from venus_core.models.loading import load_model
from venus_core.train.attention_supervision import AttentionSupervision, eager_attention
from venus_core.train.data import load_corpus
from venus_core.train.distributed import DistEnv
from venus_core.train.sft import train_sft
from venus_core.train.tracker import MemoryTracker

CPU = DistEnv(0, 1, 0, torch.device("cpu"), "single")
GROUNDING = MixtureSpec(perception=0, vqa=0, grounding=1, navigation=0)
SPEC = AttentionSupervisionSpec(weight=1.0)


@pytest.fixture(scope="module")
def navigation_l1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from venus_core.data.synth import synthesize

    out = tmp_path_factory.mktemp("attn-data") / "n1"
    synthesize("navigation", 6, 1, 9, out, platform="mobile")
    return out


def _sup(model: torch.nn.Module, proc: object) -> AttentionSupervision:
    return AttentionSupervision(SPEC, proc.tokenizer, int(model.config.image_token_id),  # type: ignore[attr-defined]
                                int(model.config.vision_config.spatial_merge_size))


def test_targets_are_the_digit_predicting_positions_and_the_visual_token_under_the_point(
        train_tiny_dir: Path, grounding_l0: Path, navigation_l1: Path) -> None:
    model, proc = load_model(train_tiny_dir, ModelSpec())
    sup = _sup(model, proc)
    tok = proc.tokenizer  # type: ignore[attr-defined]
    ground = load_corpus([grounding_l0], validation_fraction=0.0, history_len=5, seed=0)
    nav = load_corpus([navigation_l1], validation_fraction=0.0, history_len=5, seed=0)
    items = [it for it in ground.train["grounding"] if it.record.box is not None][:2] \
        + [it for it in ground.train["grounding"] if it.record.box is None][:1] + nav.train["navigation"][:4]
    examples = [it.example() for it in items]
    batch = collate(examples, proc)
    found = {b: (q, k) for b, q, k in sup.targets(batch["input_ids"], batch["labels"], batch["image_grid_thw"])}
    for b, ex in enumerate(examples):
        m = re.search(r"(?:box=\(|^\[)(\d+),\s*(\d+)", ex.target)
        if m is None:  # a refusal [-1,-1], Finished, ...: nothing to supervise
            assert b not in found
            continue
        queries, key = found[b]
        # the tokens these positions predict are exactly the two numbers' digits (and the comma between)
        predicted = tok.decode([int(batch["labels"][b, q + 1]) for q in queries])
        assert re.fullmatch(rf"{m[1]},\s*{m[2]}", predicted), (predicted, ex.target)
        assert int(batch["input_ids"][b, key]) == int(model.config.image_token_id)
        # the key is the visual token whose cell holds the point: row-major over the merged grid
        grid = batch["image_grid_thw"][b]
        gh, gw = int(grid[1]) // 2, int(grid[2]) // 2
        visual = (batch["input_ids"][b] == int(model.config.image_token_id)).nonzero().flatten().tolist()
        cell = visual.index(key)
        assert cell // gw == min(gh - 1, int(m[2]) * gh // 1000) and cell % gw == min(gw - 1, int(m[1]) * gw // 1000)
    assert any(b >= 3 for b in found)  # navigation clicks are found, not only grounding answers


def test_loss_is_minus_log_of_the_head_mean_mass(train_tiny_dir: Path, grounding_l0: Path) -> None:
    model, proc = load_model(train_tiny_dir, ModelSpec())
    sup = _sup(model, proc)
    corpus = load_corpus([grounding_l0], validation_fraction=0.0, history_len=5, seed=0)
    examples = [it.example() for it in corpus.train["grounding"] if it.record.box is not None][:3]
    batch = collate(examples, proc)
    before = model.config.text_config._attn_implementation
    with torch.no_grad(), eager_attention(model):
        assert model.config.text_config._attn_implementation == "eager"
        out = model(**batch, output_attentions=True)
    assert model.config.text_config._attn_implementation == before != "eager"
    got = sup.loss(out.attentions, batch["input_ids"], batch["labels"], batch["image_grid_thw"])
    att = out.attentions[-1]
    terms = [-torch.log(att[b, :, q, k].mean(0)).mean()
             for b, q, k in sup.targets(batch["input_ids"], batch["labels"], batch["image_grid_thw"])]
    assert got is not None and len(terms) == 3
    assert torch.allclose(got, torch.stack(terms).mean(), atol=1e-6)


def _train(tiny: Path, data: Path, ckpt: Path, weight: float) -> tuple[torch.nn.Module, MemoryTracker]:
    model, proc = load_model(tiny, ModelSpec())
    corpus = load_corpus([data], validation_fraction=0.1, history_len=5, seed=0)
    cfg = MidTrainSpec(max_steps=12, batch_size=4, lr=3e-3, warmup_steps=2, save_every=100, eval_every=100, seed=1,
                       attention_supervision=AttentionSupervisionSpec(weight=weight))
    tracker = MemoryTracker()
    train_sft(model, proc, corpus, GROUNDING, cfg, CPU, ckpt_dir=ckpt, tracker=tracker, eval_limit=2)
    return model, tracker


def _mass(model: torch.nn.Module, tiny: Path, data: Path) -> float:
    _, proc = load_model(tiny, ModelSpec())
    sup = _sup(model, proc)
    corpus = load_corpus([data], validation_fraction=0.0, history_len=5, seed=0)
    batch = collate([it.example() for it in corpus.train["grounding"] if it.record.box is not None][:8], proc)
    model.eval()
    with torch.no_grad(), eager_attention(model):
        out = model(**batch, output_attentions=True)
    loss = sup.loss(out.attentions, batch["input_ids"], batch["labels"], batch["image_grid_thw"])
    assert loss is not None
    return math.exp(-float(loss))


def test_training_with_it_logs_it_and_puts_mass_on_the_target(train_tiny_dir: Path, grounding_l0: Path,
                                                              tmp_path: Path) -> None:
    plain, _ = _train(train_tiny_dir, grounding_l0, tmp_path / "plain", 0.0)
    supervised, tracker = _train(train_tiny_dir, grounding_l0, tmp_path / "sup", 1.0)
    losses = [v for _, v in tracker.series("train/attention_supervision_loss")]
    assert losses and all(math.isfinite(v) and v > 0 for v in losses)
    # the kernel is back to the spec's after training (eager only inside the supervised forward passes)
    assert supervised.config.text_config._attn_implementation == plain.config.text_config._attn_implementation
    assert _mass(supervised, train_tiny_dir, grounding_l0) > 2 * _mass(plain, train_tiny_dir, grounding_l0)


def test_deepspeed_backend_refuses_it(train_tiny_dir: Path, grounding_l0: Path, tmp_path: Path) -> None:
    model, proc = load_model(train_tiny_dir, ModelSpec())
    corpus = load_corpus([grounding_l0], validation_fraction=0.1, history_len=5, seed=0)
    cfg = MidTrainSpec(max_steps=2, batch_size=4, attention_supervision=SPEC)
    with pytest.raises(ValueError, match="attention_supervision is not supported with distributed.backend=deepspeed"):
        train_sft(model, proc, corpus, GROUNDING, cfg, DistEnv(0, 1, 0, torch.device("cpu"), "deepspeed"),
                  ckpt_dir=tmp_path / "ds")


@pytest.mark.parametrize("masked", [True, False])
def test_recording_gives_the_eager_loss_and_gradients_with_sdpa(train_tiny_dir: Path, grounding_l0: Path,
                                                               navigation_l1: Path, masked: bool) -> None:
    from venus_core.models.batches import without_padding_mask

    model, proc = load_model(train_tiny_dir, ModelSpec())
    sup = _sup(model, proc)
    ground = load_corpus([grounding_l0], validation_fraction=0.0, history_len=5, seed=0)
    nav = load_corpus([navigation_l1], validation_fraction=0.0, history_len=5, seed=0)
    items = [it for it in ground.train["grounding"] if it.record.box is not None][:2] + nav.train["navigation"][:3]
    batch = collate([it.example() for it in items], proc)
    inputs = batch if masked else without_padding_mask(batch)
    assert ("attention_mask" in inputs) == masked
    targets = sup.targets(batch["input_ids"], batch["labels"], batch["image_grid_thw"])
    assert len(targets) >= 4
    model.train()

    def grads() -> torch.Tensor:
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    model.zero_grad(set_to_none=True)
    with eager_attention(model):
        out = model(**batch, output_attentions=True)
    ref = sup.loss(out.attentions, batch["input_ids"], batch["labels"], batch["image_grid_thw"])
    assert ref is not None
    (out.loss + ref).backward()
    ref_grads = grads()
    model.zero_grad(set_to_none=True)
    kernel = model.config.text_config._attn_implementation
    with sup.recording(model, targets) as rec:
        out2 = model(**inputs)
    assert model.config.text_config._attn_implementation == kernel != "eager"
    got = sup.recorded_loss(rec)
    assert got is not None and len(rec.masses) == len(targets)
    (out2.loss + got).backward()
    assert torch.allclose(got, ref, rtol=1e-5, atol=1e-6) and torch.allclose(out2.loss, out.loss, rtol=1e-5, atol=1e-6)
    assert float((grads() - ref_grads).norm() / ref_grads.norm()) < 1e-4
    # a forward pass outside the recording layer's reach is a clear error, not a silent zero
    with sup.recording(model, targets) as rec2:
        pass
    with pytest.raises(RuntimeError, match="recorded 0 of"):
        sup.recorded_loss(rec2)


def test_recording_under_gradient_checkpointing_gives_the_same_gradients(train_tiny_dir: Path,
                                                                         navigation_l1: Path) -> None:
    from venus_core.models.batches import without_padding_mask
    from venus_core.train.distributed import enable_gradient_checkpointing

    model, proc = load_model(train_tiny_dir, ModelSpec())
    sup = _sup(model, proc)
    nav = load_corpus([navigation_l1], validation_fraction=0.0, history_len=5, seed=0)
    batch = without_padding_mask(collate([it.example() for it in nav.train["navigation"][:3]], proc))
    targets = sup.targets(batch["input_ids"], batch["labels"], batch["image_grid_thw"])
    assert targets
    model.train()

    def step() -> tuple[float, torch.Tensor, int]:
        model.zero_grad(set_to_none=True)
        with sup.recording(model, targets) as rec:
            out = model(**batch)
            loss = sup.recorded_loss(rec)
            assert loss is not None
            (out.loss + loss).backward()  # inside: a checkpointed layer recomputes through the recording kernel
        return float(loss), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]), len(rec.masses)

    ref_loss, ref_grads, n_plain = step()
    enable_gradient_checkpointing(model)
    got_loss, got_grads, n_checkpointed = step()
    assert n_plain == len(targets) and n_checkpointed == 2 * len(targets)  # the recomputation recorded again
    assert abs(got_loss - ref_loss) < 1e-6
    assert float((got_grads - ref_grads).norm() / ref_grads.norm()) < 1e-5


def test_mid_training_checkpoints_activations_when_the_spec_says_so(train_tiny_dir: Path, grounding_l0: Path,
                                                                    tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from venus_core.config.training import DistributedSpec

    from venus_core.train import attention_supervision as module

    calls = [0]
    record = module._Recorder.record

    def counting(self: object, *args: object) -> None:
        calls[0] += 1
        record(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(module._Recorder, "record", counting)

    def run(checkpointing: bool) -> tuple[torch.nn.Module, int]:
        model, proc = load_model(train_tiny_dir, ModelSpec())
        corpus = load_corpus([grounding_l0], validation_fraction=0.1, history_len=5, seed=0)
        cfg = MidTrainSpec(max_steps=3, batch_size=4, lr=3e-3, warmup_steps=1, save_every=100, eval_every=100, seed=1,
                           attention_supervision=SPEC, distributed=DistributedSpec(gradient_checkpointing=checkpointing))
        calls[0] = 0
        train_sft(model, proc, corpus, GROUNDING, cfg, CPU, ckpt_dir=tmp_path / str(checkpointing), eval_limit=0)
        assert not model.is_activation_checkpointing  # off again for whoever decodes with it next
        return model, calls[0]

    plain, plain_calls = run(False)
    checkpointed, checkpointed_calls = run(True)
    assert checkpointed_calls == 2 * plain_calls > 0  # the supervised layer recomputed (and recorded) in backward
    for a, b in zip(plain.parameters(), checkpointed.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)
