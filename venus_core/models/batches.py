"""Dataset records -> (chat messages, target text) -> padded training batches for Qwen-VL models.

Why: supervised stages (mid-training, the SFT warm-up before RL) and the RL log-prob pass need the
same prompt the model sees at inference (UI-Venus-1.5 prompts, `venus_core.models.prompts`) and a
loss on the answer only. The batch is built by hand (prompt through the processor, answer tokenized
separately and appended) so the label mask is exact: -100 on the system/user turn, the image pads,
`<|im_start|>assistant\\n` and padding; the answer tokens and the closing `<|im_end|>` are learned.
transformers 5 needs `mm_token_type_ids` (1 on image pads) for such batches; it is returned too.

Targets: grounding = centre of the box as `[x,y]` (floor of the mean, as the UI-Venus evaluation
builder computes it) or `[-1,-1]` for refusals; navigation = `<think>…</think><action>…</action>
<conclusion>…</conclusion>`; QA = the answer. QA prompts are the question as-is: the paper's
perception / GUI-VQA prompts are not published.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from transformers import ProcessorMixin

from venus_core.actions import REFUSAL, render_point
from venus_core.data.schema import GroundingSample, NavigationStep, QASample
from venus_core.models.prompts import build_messages, grounding_prompt, navigation_prompt

IGNORE_INDEX = -100
END_OF_TURN = "<|im_end|>"

OpenImage = Callable[[str], Image.Image]
"""Image ref (sha256:…) -> PIL image, e.g. `DatasetReader(path).open_image`."""


@dataclass(frozen=True)
class Example:
    """One training example: the prompt messages (image + text) and the answer to learn."""

    messages: list[dict[str, Any]]
    target: str
    record_id: str = ""
    query: str = ""  # what the prompt asks for (`query_text`): the instruction-head's target (train.instruction_head)


def target_text(record: GroundingSample | NavigationStep | QASample) -> str:
    """The answer a record teaches (see the module docstring)."""
    if isinstance(record, GroundingSample):
        if record.box is None:
            return render_point(REFUSAL)
        x1, y1, x2, y2 = record.box
        return render_point(((x1 + x2) // 2, (y1 + y2) // 2))
    if isinstance(record, NavigationStep):
        return (
            f"<think>{record.think.strip()}</think><action>{record.action}</action>"
            f"<conclusion>{record.conclusion.strip()}</conclusion>"
        )
    if isinstance(record, QASample):
        return record.answer
    raise TypeError(f"no training target for a {type(record).__name__} record (expand trajectories first)")


def prompt_text(record: GroundingSample | NavigationStep | QASample) -> str:
    """The user prompt a record is shown with."""
    if isinstance(record, GroundingSample):
        return grounding_prompt(record.instruction)
    if isinstance(record, NavigationStep):
        return navigation_prompt(
            record.goal,
            [(h.think, h.action) for h in record.history],
            record.platform,
            instruction=record.instruction,
            first_step=record.step_index - len(record.history),
        )
    if isinstance(record, QASample):
        return record.question
    raise TypeError(f"no prompt for a {type(record).__name__} record (expand trajectories first)")


def query_text(record: GroundingSample | NavigationStep | QASample) -> str:
    """What the prompt asks for, without the template: the grounding instruction, the navigation
    step's instruction (else its goal), the QA question."""
    if isinstance(record, GroundingSample):
        return record.instruction
    if isinstance(record, NavigationStep):
        return record.instruction if record.instruction and record.instruction.strip() else record.goal
    if isinstance(record, QASample):
        return record.question
    raise TypeError(f"no query for a {type(record).__name__} record (expand trajectories first)")


def record_to_example(record: GroundingSample | NavigationStep | QASample, open_image: OpenImage) -> Example:
    """(messages, target) of one record; the screenshot is opened with `open_image(record.image)`."""
    try:
        image = open_image(record.image)
    except Exception as exc:
        raise ValueError(f"record {record.id!r}: cannot open image {record.image}: {exc}") from exc
    return Example(build_messages(image, prompt_text(record)), target_text(record), record.id, query_text(record))


def message_images(messages: Sequence[dict[str, Any]]) -> list[Image.Image]:
    """The images of a chat, in order, as RGB PIL images (paths are opened)."""
    out: list[Image.Image] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            continue
        for item in content or []:
            if item.get("type") != "image":
                continue
            img = item.get("image")
            if isinstance(img, (str, Path)):
                with Image.open(img) as f:
                    img = f.convert("RGB")
            if not isinstance(img, Image.Image):
                raise TypeError(f"image item holds a {type(img).__name__}, expected a PIL image or a path")
            out.append(img if img.mode == "RGB" else img.convert("RGB"))
    return out


def encode_prompts(
    processor: ProcessorMixin, batch: Sequence[Sequence[dict[str, Any]]]
) -> tuple[list[list[int]], list[list[int]], dict[str, torch.Tensor]]:
    """Prompt token ids and mm_token_type_ids per chat (unpadded), and the stacked image tensors."""
    texts = [
        processor.apply_chat_template(list(msgs), tokenize=False, add_generation_prompt=True)  # type: ignore[attr-defined]
        for msgs in batch
    ]
    images = [message_images(msgs) for msgs in batch]
    flat = [img for imgs in images for img in imgs]
    enc = processor(text=texts, images=flat or None, padding=False)  # type: ignore[operator]
    ids = [list(map(int, row)) for row in enc["input_ids"]]
    mm = enc.get("mm_token_type_ids")
    if mm is None:
        image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")  # type: ignore[attr-defined]
        mm_rows = [[1 if t == image_id else 0 for t in row] for row in ids]
    else:
        mm_rows = [list(map(int, row)) for row in mm]
    vision: dict[str, torch.Tensor] = {}
    if flat:
        vision["pixel_values"] = torch.as_tensor(enc["pixel_values"])
        vision["image_grid_thw"] = torch.as_tensor(enc["image_grid_thw"])
    return ids, mm_rows, vision


def collate(
    examples: Sequence[Example], processor: ProcessorMixin, *, max_length: int | None = None, with_query: bool = False
) -> dict[str, torch.Tensor]:
    """Right-padded batch: input_ids, attention_mask, labels, mm_token_type_ids, pixel_values,
    image_grid_thw. Labels are -100 everywhere but the answer tokens and their `<|im_end|>`.
    `with_query`: also `query_ids`, each example's `query` tokenized on its own (rows padded with
    -1; not a model input: the instruction head's target, popped before the forward pass).

    An example longer than `max_length` is an error (truncation would cut image tokens or the answer).
    """
    if not examples:
        raise ValueError("collate: empty batch")
    tokenizer = processor.tokenizer  # type: ignore[attr-defined]
    prompt_ids, mm_rows, vision = encode_prompts(processor, [ex.messages for ex in examples])
    rows: list[tuple[list[int], list[int], list[int]]] = []
    for ex, p_ids, p_mm in zip(examples, prompt_ids, mm_rows):
        a_ids = list(tokenizer(ex.target + END_OF_TURN, add_special_tokens=False)["input_ids"])
        ids = p_ids + a_ids
        if max_length is not None and len(ids) > max_length:
            raise ValueError(
                f"example {ex.record_id or '?'}: {len(ids)} tokens ({len(p_ids)} prompt + {len(a_ids)} answer)"
                f" > max_length {max_length}"
            )
        rows.append((ids, [IGNORE_INDEX] * len(p_ids) + a_ids, p_mm + [0] * len(a_ids)))
    width = max(len(r[0]) for r in rows)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    n = len(rows)
    input_ids = torch.full((n, width), int(pad_id), dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    labels = torch.full((n, width), IGNORE_INDEX, dtype=torch.long)
    mm_types = torch.zeros((n, width), dtype=torch.long)
    for i, (ids, lab, mm) in enumerate(rows):
        k = len(ids)
        input_ids[i, :k] = torch.tensor(ids)
        attention[i, :k] = 1
        labels[i, :k] = torch.tensor(lab)
        mm_types[i, :k] = torch.tensor(mm)
    out = {
        "input_ids": input_ids,
        "attention_mask": attention,
        "labels": labels,
        "mm_token_type_ids": mm_types,
        **vision,
    }
    if with_query:
        queries = [list(tokenizer(ex.query, add_special_tokens=False)["input_ids"]) if ex.query else [] for ex in examples]
        q = torch.full((n, max(1, max(len(r) for r in queries))), -1, dtype=torch.long)
        for i, row in enumerate(queries):
            q[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        out["query_ids"] = q
    return out


def without_padding_mask(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The training batch without its `attention_mask` when every row is right-padded (ones, then
    zeros): for a causal decoder the mask then changes nothing that is learned, since a real token
    attends only to the tokens before it, never to the padding after its row's end, and the padding's
    own labels are -100. Without a mask the sdpa kernel runs causal and skips the masked half of the
    score matrix: measured on a venus-tiny navigation batch (16 rows of ~1,000-1,180 tokens, 2
    threads) 1.28 -> 0.95 s a training step, the same loss and gradients to 2e-7 relative (float
    order). Qwen3-VL's rope positions of the real tokens do not change either: without a mask they
    count from each row's start, as they do with right padding. A batch padded any other way (left
    padding for generation) keeps its mask."""
    mask = batch.get("attention_mask")
    if mask is None or mask.ndim != 2:
        return batch
    if mask.shape[1] > 1 and bool((mask[:, 1:] > mask[:, :-1]).any()):  # a zero before a one: not right padding
        return batch
    return {k: v for k, v in batch.items() if k != "attention_mask"}
