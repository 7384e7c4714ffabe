"""Shared-prefix log-probabilities: same values and gradients as the plain pass, on mixed prompts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from venus_core.config.spec import ModelSpec
from venus_core.data.store import DatasetReader
from venus_core.models.loading import load_model
from venus_core.rl.prefix import shared_prefix_logits, supports_shared_prefix
from venus_core.rl.prompts import grounding_item, navigation_item
from venus_core.rl.rollout import sample_groups, sequence_logprobs


def _chats(grounding_data: Path, nav_data: Path) -> list:  # type: ignore[type-arg]
    g = DatasetReader(grounding_data)
    chats = [grounding_item(r, g.open_image).messages for r in list(g)[:2]]
    n = DatasetReader(nav_data)
    steps = [s for rec in n for s in rec.to_steps(5)]  # type: ignore[union-attr]
    chats += [navigation_item(s, n.open_image).messages for s in steps[1:3]]
    return chats  # prompts of very different lengths: left padding differs per group


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_shared_prefix_matches_the_plain_pass(tiny_dir: Path, grounding_data: Path, nav_data: Path) -> None:
    model, proc = load_model(tiny_dir, ModelSpec())
    assert supports_shared_prefix(model)
    batch = sample_groups(model, proc, _chats(grounding_data, nav_data), 3, 12, seed=4)
    mask = batch.completion_mask.bool()
    out = {}
    for shared in (False, True):
        model.zero_grad(set_to_none=True)
        logp, ent = sequence_logprobs(model, batch, temperature=0.7, with_entropy=True, shared_prefix=shared)
        ((logp * batch.completion_mask).sum() + 0.1 * (ent * batch.completion_mask).sum()).backward()  # type: ignore[operator]
        out[shared] = (logp.detach(), ent.detach(), _grads(model))  # type: ignore[union-attr]
    plain, shared = out[False], out[True]
    assert torch.allclose(shared[0][mask], plain[0][mask], atol=1e-4)
    assert torch.allclose(shared[1][mask], plain[1][mask], atol=1e-4)
    assert set(shared[2]) == set(plain[2])
    for name, g in plain[2].items():
        assert torch.isfinite(shared[2][name]).all(), name
        assert torch.allclose(shared[2][name], g, rtol=1e-3, atol=1e-5), name
    # the vision tower gets its gradient through the repeated cache
    assert any(".visual." in f".{n}" and float(g.abs().max()) > 0 for n, g in shared[2].items())


def test_shared_prefix_rejects_rows_that_are_not_groups(tiny_dir: Path, grounding_data: Path, nav_data: Path) -> None:
    model, proc = load_model(tiny_dir, ModelSpec())
    batch = sample_groups(model, proc, _chats(grounding_data, nav_data)[:2], 2, 4, seed=1)
    swapped = batch.select([0, 2, 1, 3])  # rows 0 and 1 now hold different prompts
    with pytest.raises(ValueError, match="different prompts"):
        shared_prefix_logits(model, swapped)
    with pytest.raises(ValueError, match="whole groups"):
        shared_prefix_logits(model, batch.select([0, 1, 2]))


def _prompt_tensors(model: torch.nn.Module, proc: object, chats: list) -> tuple:  # type: ignore[type-arg]
    from venus_core.models.batches import encode_prompts
    from venus_core.rl.rollout import _left_pad

    ids, mm_rows, vision = encode_prompts(proc, chats)  # type: ignore[arg-type]
    pad = int(proc.tokenizer.pad_token_id)  # type: ignore[attr-defined]
    p_ids, p_mask = _left_pad(ids, pad)
    p_mm, _ = _left_pad(mm_rows, 0)
    return p_ids, p_mask, p_mm, vision, pad


def test_greedy_shared_prefix_decoding_reproduces_generate(tiny_dir: Path, grounding_data: Path, nav_data: Path) -> None:
    from venus_core.rl.prefix import shared_prefix_sample
    from venus_core.rl.rollout import end_token_ids, suppressed_token_ids

    model, proc = load_model(tiny_dir, ModelSpec())
    chats = _chats(grounding_data, nav_data)
    p_ids, p_mask, p_mm, vision, pad = _prompt_tensors(model, proc, chats)
    ends, sup = end_token_ids(model, proc), suppressed_token_ids(proc)
    ours = shared_prefix_sample(model, p_ids, p_mask, p_mm, vision, 2, 10, end_ids=ends, pad_id=pad, suppressed=sup,
                                greedy=True)
    ref = model.generate(input_ids=p_ids, attention_mask=p_mask, mm_token_type_ids=p_mm, **vision, do_sample=False,
                         max_new_tokens=10, pad_token_id=pad, eos_token_id=ends, suppress_tokens=sup,
                         repetition_penalty=1.0)[:, p_ids.shape[1]:]
    assert ours.shape[0] == 2 * len(chats)
    assert torch.equal(ours[::2], ref[:, : ours.shape[1]]) and torch.equal(ours[1::2], ours[::2])
    # a nucleus this small keeps only the most likely token: sampling then equals greedy decoding
    nucleus = shared_prefix_sample(model, p_ids, p_mask, p_mm, vision, 2, 10, end_ids=ends, pad_id=pad, suppressed=sup,
                                   temperature=1.0, top_p=1e-6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(nucleus, ours)


def test_sampled_groups_differ_within_a_group_and_follow_the_seed(tiny_dir: Path, grounding_data: Path) -> None:
    model, proc = load_model(tiny_dir, ModelSpec())
    g = DatasetReader(grounding_data)
    chats = [grounding_item(r, g.open_image).messages for r in list(g)[:2]]
    a = sample_groups(model, proc, chats, 4, 8, seed=11)
    b = sample_groups(model, proc, chats, 4, 8, seed=11)
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert len({tuple(r.tolist()) for r in a.completion_ids[:4]}) > 1, "a group's samples are not all the same"
    suppressed = set(a.suppressed)
    assert suppressed and not (suppressed & set(a.completion_ids.flatten().tolist()))
