"""Records -> (messages, target) -> batches: targets, exact label mask, one training step."""

from __future__ import annotations

import hashlib

import pytest
import torch
from PIL import Image

from venus_core.data.schema import GroundingSample, HistoryItem, NavigationStep, Provenance, QASample
from venus_core.models.batches import IGNORE_INDEX, Example, collate, record_to_example, target_text
from venus_core.models.prompts import build_messages, grounding_prompt

from models_helpers import screen

PROV = Provenance(source="unit", source_id="x")


def _ref(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


IMAGES = {_ref("red"): screen((220, 20, 20)), _ref("blue"): screen((20, 20, 220), (200, 120))}


def _records() -> list[GroundingSample | NavigationStep | QASample]:
    return [
        GroundingSample(id="g1", image=_ref("red"), image_size=(128, 128), platform="mobile",
                        instruction="the OK button.", box=(100, 201, 300, 400), provenance=PROV),
        GroundingSample(id="g2", image=_ref("blue"), image_size=(200, 120), platform="web",
                        instruction="the 设置 icon", box=None, refusal=True, provenance=PROV),
        NavigationStep(id="n1", image=_ref("blue"), image_size=(200, 120), platform="mobile",
                       goal="Open Settings", history=[HistoryItem(think="go home", action="PressHome()")],
                       think=" tap it ", action="Click(box=(500,510))", conclusion="Tapped Settings.",
                       step_index=3, episode_id="e1", provenance=PROV),
        QASample(id="q1", domain="vqa", image=_ref("red"), image_size=(128, 128), platform="web",
                 question="What colour is the screen?", answer="red", provenance=PROV),
    ]


def test_targets() -> None:
    g1, g2, n1, q1 = _records()
    assert target_text(g1) == "[200,300]"  # floor((100+300)/2), floor((201+400)/2)
    assert target_text(g2) == "[-1,-1]"
    assert target_text(n1) == "<think>tap it</think><action>Click(box=(500,510))</action><conclusion>Tapped Settings.</conclusion>"
    assert target_text(q1) == "red"


def test_record_to_example_builds_the_prompt_and_names_bad_images() -> None:
    g1, _, n1, _ = _records()
    ex = record_to_example(g1, IMAGES.__getitem__)
    assert ex.messages == build_messages(IMAGES[_ref("red")], grounding_prompt("the OK button"))
    assert ex.record_id == "g1"
    nav = record_to_example(n1, IMAGES.__getitem__).messages[0]["content"][1]["text"]
    assert "Step 3: <think>go home</think><action>PressHome()</action>" in nav  # history[0] = step 2
    with pytest.raises(ValueError, match="record 'g1': cannot open image"):
        record_to_example(g1, {}.__getitem__)


def test_labels_mask_exactly_the_answer_tokens(tiny) -> None:  # type: ignore[no-untyped-def]
    _, processor = tiny
    tok = processor.tokenizer
    examples = [record_to_example(r, IMAGES.__getitem__) for r in _records()]
    batch = collate(examples, processor)
    n, width = batch["input_ids"].shape
    assert n == 4 and batch["labels"].shape == batch["mm_token_type_ids"].shape == (n, width)
    image_id = tok.convert_tokens_to_ids("<|image_pad|>")
    grids = batch["image_grid_thw"]
    assert grids.shape == (4, 3) and batch["pixel_values"].shape[0] == int(grids.prod(dim=1).sum())
    for i, ex in enumerate(examples):
        ids, labels, mask = batch["input_ids"][i], batch["labels"][i], batch["attention_mask"][i]
        length = int(mask.sum())
        assert mask[:length].all() and not mask[length:].any()
        answer = tok(ex.target + "<|im_end|>", add_special_tokens=False)["input_ids"]
        learned = (labels != IGNORE_INDEX).nonzero().flatten().tolist()
        assert learned == list(range(length - len(answer), length))
        assert labels[learned].tolist() == ids[learned].tolist() == answer
        assert tok.decode(ids[learned]) == ex.target + "<|im_end|>"
        assert tok.decode(ids[: length - len(answer)]).endswith("<|im_start|>assistant\n")
        # mm_token_type_ids marks exactly the image pads; one pad per merged visual token.
        assert torch.equal(batch["mm_token_type_ids"][i].bool(), ids.eq(image_id) & mask.bool())
        assert int(ids.eq(image_id).sum()) == int(grids[i].prod()) // 4
    assert (batch["input_ids"][~batch["attention_mask"].bool()] == tok.pad_token_id).all()


def test_one_forward_backward_on_a_batch_of_four_is_finite(tiny) -> None:  # type: ignore[no-untyped-def]
    model, processor = tiny
    batch = collate([record_to_example(r, IMAGES.__getitem__) for r in _records()], processor)
    model.train()
    try:
        model.zero_grad()
        loss = model(**batch).loss
        loss.backward()
    finally:
        model.eval()
    assert torch.isfinite(loss) and loss.item() > 0
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert model.lm_head.weight.grad.abs().sum() > 0 and model.model.visual.patch_embed.proj.weight.grad.abs().sum() > 0
    model.zero_grad()


def test_collate_errors(tiny) -> None:  # type: ignore[no-untyped-def]
    _, processor = tiny
    with pytest.raises(ValueError, match="empty batch"):
        collate([], processor)
    ex = Example(build_messages(Image.new("RGB", (64, 64)), "hi"), "answer", "r7")
    with pytest.raises(ValueError, match="example r7: .* > max_length 10"):
        collate([ex], processor, max_length=10)


def _loss_and_grads(model, batch):  # type: ignore[no-untyped-def]
    model.zero_grad(set_to_none=True)
    out = model(**batch)
    out.loss.backward()
    return out.loss.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_a_right_padded_batch_learns_the_same_without_its_mask(tiny, kernel) -> None:  # type: ignore[no-untyped-def]
    from venus_core.models.batches import without_padding_mask
    from venus_core.train.attention_supervision import eager_attention

    model, processor = tiny
    torch.manual_seed(0)
    batch = collate([record_to_example(r, IMAGES.__getitem__) for r in _records()], processor)
    lengths = batch["attention_mask"].sum(dim=1)
    assert len(set(lengths.tolist())) > 1  # rows of different lengths: real padding
    bare = without_padding_mask(batch)
    assert "attention_mask" not in bare and set(bare) == set(batch) - {"attention_mask"}
    model.train()
    try:
        with eager_attention(model) if kernel == "eager" else torch.enable_grad():
            loss, grads = _loss_and_grads(model, batch)
            loss2, grads2 = _loss_and_grads(model, bare)
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()
    assert torch.allclose(loss, loss2, rtol=1e-5, atol=1e-6)
    assert float((grads - grads2).norm() / grads.norm()) < 1e-4
    # a wrong mask is not dropped blindly: a left-padded row keeps the batch's mask
    left = dict(batch)
    mask = batch["attention_mask"].clone()
    short = int(lengths.argmin())
    mask[short] = torch.roll(mask[short], shifts=int((mask[short] == 0).sum()))
    left["attention_mask"] = mask
    assert without_padding_mask(left) is left
    assert without_padding_mask({k: v for k, v in batch.items() if k != "attention_mask"})["input_ids"] is batch["input_ids"]
