"""Reading stage: train the vision tower to read the words on buttons, before the choice by label.

Why (docs/learning.md, "Which tiny vision tower can read a button's word"): level 2 ("click the
"Send" button" among 3-9 labelled buttons) stayed at the random-button level because the tiny
model's visual tokens carry a button's colour and place but not its word (a linear probe on them
found the word at chance, 15 classes), even after thousands of grounding steps and perception
questions answered by the word. Trained directly for it on fresh screens, the same tower reads:
from the shipped bootstrap's tower, 60 % of held-out buttons after 3,000 steps. The choice by label
can only be learned once the word is in the token, so this stage comes before level-2 grounding.

How: a word classifier (a non-affine LayerNorm, as the text model's layers start with a norm, and a
linear layer over `WORD_CLASSES`) on the mean of the merged visual tokens (what the text model
receives) whose cell overlaps the central half of a labelled button, where the word is drawn. The
tower and the classifier train together (Adam, cross-entropy) on a stream of fresh level-2 screens
from the project's generator (`data.synth.reading.labelled_screens`, each screen seen once); the
classifier is discarded, and only the vision tower's weights move. Held out: screens of another
seed, scored before and after.

Departure: UI-Venus-1.5 starts from a Qwen3-VL that reads (OCR is part of its pre-training); this
stage stands in for that at toy scale, on the synthetic world's closed word list.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, ProcessorMixin

from venus_core.data.synth.reading import WORD_CLASSES, LabelledScreen, labelled_screens
from venus_core.eval.metrics import Rate
from venus_core.models.loading import vision_tower
from venus_core.train.checkpoint import save_checkpoint
from venus_core.train.tracker import NullTracker, Tracker

HELD_OUT_OFFSET = 500_000
"""Held-out screens come from seed + this (the training stream is `seed`): never the same screens."""


@dataclass(frozen=True)
class ReadingBatch:
    pixel_values: torch.Tensor  # the image processor's patches of every screen, concatenated
    grid_thw: torch.Tensor  # (screens, 3)
    pool: torch.Tensor  # (buttons, merged tokens of the batch): mean over each button's central cells
    labels: torch.Tensor  # (buttons,) word classes


def button_cells(box: tuple[int, int, int, int], rows: int, cols: int) -> list[int]:
    """Row-major indices of the merged-token cells (a rows x cols grid over the 0-1000 frame) that
    overlap the central half of `box` (the middle 50 % of its width and height)."""
    x1, y1, x2, y2 = box
    cx1, cx2 = x1 + (x2 - x1) / 4, x2 - (x2 - x1) / 4
    cy1, cy2 = y1 + (y2 - y1) / 4, y2 - (y2 - y1) / 4
    cs = [c for c in range(cols) if c * 1000 / cols < cx2 and (c + 1) * 1000 / cols > cx1]
    rs = [r for r in range(rows) if r * 1000 / rows < cy2 and (r + 1) * 1000 / rows > cy1]
    return [r * cols + c for r in rs for c in cs]


def encode(image_processor: Any, screens: list[LabelledScreen], merge: int) -> ReadingBatch | None:
    """The batch of `screens` (None when none of them has a labelled button)."""
    if not screens:
        return None
    enc = image_processor(images=[s.image for s in screens], return_tensors="pt")  # one call: patches concatenated
    rows_, cols_, vals, labels = [], [], [], []
    offset = 0
    for s, thw in zip(screens, enc["image_grid_thw"]):
        t, h, w = (int(v) for v in thw)
        gh, gw = h // merge, w // merge
        for box, word in s.buttons:
            cells = button_cells(box, gh, gw)
            if not cells:  # a box narrower than half a cell still covers the cell of its centre
                cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
                cells = [min(gh - 1, int(cy * gh / 1000)) * gw + min(gw - 1, int(cx * gw / 1000))]
            for c in cells:
                rows_.append(len(labels))
                cols_.append(offset + c)
                vals.append(1.0 / len(cells))
            labels.append(word)
        offset += t * gh * gw
    if not labels:
        return None
    pool = torch.sparse_coo_tensor(torch.tensor([rows_, cols_]), torch.tensor(vals), (len(labels), offset),
                                   check_invariants=True)
    return ReadingBatch(enc["pixel_values"], enc["image_grid_thw"], pool.coalesce(), torch.tensor(labels))


class ReadingHead(torch.nn.Module):
    """Word logits of each button from the tower's merged tokens."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width, elementwise_affine=False)
        self.proj = torch.nn.Linear(width, len(WORD_CLASSES))

    def forward(self, tower: torch.nn.Module, batch: ReadingBatch) -> torch.Tensor:
        param = next(tower.parameters())
        out = tower(batch.pixel_values.to(param.device, param.dtype), grid_thw=batch.grid_thw.to(param.device))
        merged = out.pooler_output if hasattr(out, "pooler_output") else out
        pooled = torch.sparse.mm(batch.pool.to(merged.device, merged.dtype), merged)
        return self.proj(self.norm(pooled.float()))


def _merge_size(model: PreTrainedModel) -> int:
    return int(model.config.vision_config.spatial_merge_size)  # type: ignore[attr-defined]


def score(model: PreTrainedModel, processor: ProcessorMixin, head: ReadingHead, screens: list[LabelledScreen],
          batch: int = 32) -> Rate:
    """Held-out word accuracy of `head` on `screens` (every labelled button one sample)."""
    tower, merge = vision_tower(model), _merge_size(model)
    was = tower.training
    tower.eval()
    k = n = 0
    with torch.no_grad():
        for a in range(0, len(screens), batch):
            b = encode(processor.image_processor, screens[a:a + batch], merge)  # type: ignore[attr-defined]
            if b is None:
                continue
            k += int((head(tower, b).argmax(1).cpu() == b.labels).sum())
            n += len(b.labels)
    tower.train(was)
    return Rate(k, n)


class ReadingTask:
    """The reading loss as a task: step `k` reads screens `(k-1)*batch ..` of the `seed` stream (so a
    resumed run reads what an uninterrupted one would). Also an auxiliary task of another stage
    (`train_sft(..., aux_tasks=[task])`): the grounding loss beside it keeps the tower's position code,
    which reading alone wears away (docs/learning.md)."""

    name = "reading_head"

    def __init__(self, model: PreTrainedModel, processor: ProcessorMixin, *, weight: float, seed: int,
                 level: int = 2, batch: int = 16, layout: str = "grid") -> None:
        if weight <= 0 or batch < 1:
            raise ValueError(f"reading task: need weight > 0 and batch >= 1, got {weight}, {batch}")
        labelled_screens(seed, 0, level=level, layout=layout)  # a bad level / layout fails here, not at step 1
        self.model, self.processor, self.layout = model, processor, layout
        self.weight, self.seed, self.level, self.batch = weight, seed, level, batch
        self.tower, self.merge = vision_tower(model), _merge_size(model)
        if not any(p.requires_grad for p in self.tower.parameters()):
            raise ValueError("reading task: the vision tower is frozen (mid_train.freeze_vision?); reading trains it")
        width = int(model.config.text_config.hidden_size)  # type: ignore[attr-defined]
        with torch.random.fork_rng(devices=[]):  # the classifier's init is seeded; the caller's RNG is left alone
            torch.manual_seed(seed)
            self.module = ReadingHead(width).to(next(self.tower.parameters()).device)
        self.data_s = 0.0

    def loss(self, step: int) -> torch.Tensor:
        c0 = time.process_time()
        b = encode(self.processor.image_processor,  # type: ignore[attr-defined]
                   labelled_screens(self.seed, self.batch, level=self.level, start=(step - 1) * self.batch,
                                    layout=self.layout), self.merge)
        self.data_s += time.process_time() - c0
        if b is None:
            raise ValueError(f"reading step {step}: no labelled button on {self.batch} level-{self.level} screens "
                             "(reading needs labelled boards: level 2)")
        loss = torch.nn.functional.cross_entropy(self.module(self.tower, b), b.labels.to(self.module.proj.weight.device))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"reading step {step}: loss is {float(loss)}")
        return loss

    def score(self, screens: int = 200) -> Rate:
        """Held-out word accuracy on `screens` screens of `seed + HELD_OUT_OFFSET`."""
        return score(self.model, self.processor, self.module,
                     labelled_screens(self.seed + HELD_OUT_OFFSET, screens, level=self.level, layout=self.layout))

    def report(self, screens: int = 200) -> dict[str, Any]:
        return {"reading/word": self.score(screens).to_dict()}


def train_reading(model: PreTrainedModel, processor: ProcessorMixin, *, steps: int, lr: float, seed: int,
                  level: int = 2, batch: int = 16, eval_screens: int = 200, tracker: Tracker | None = None,
                  log_every: int = 100, ckpt_dir: str | Path | None = None, layout: str = "grid") -> dict[str, Any]:
    """Train `model`'s vision tower alone, in place, for `steps` steps of `batch` fresh screens
    (training stream `seed`, held-out screens `seed + HELD_OUT_OFFSET`); the report: held-out word
    accuracy of the trained classifier (against chance, 1 / the number of words), the loss curve and
    CPU time. `ckpt_dir`: also write a training checkpoint `ckpt_dir/step-N` (the model, the
    classifier as `reading_head.safetensors`), from which a bootstrap can continue."""
    if steps < 1:
        raise ValueError(f"reading stage: need steps >= 1, got {steps}")
    tracker = tracker or NullTracker()
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    task = ReadingTask(model, processor, weight=1.0, seed=seed, level=level, batch=batch, layout=layout)
    params = list(task.tower.parameters()) + list(task.module.parameters())
    opt = torch.optim.Adam(params, lr=lr)
    task.tower.train()
    window: list[float] = []
    curve: list[dict[str, Any]] = []
    for step in range(1, steps + 1):
        loss = task.loss(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        window.append(float(loss.detach()))
        if step % log_every == 0 or step == steps:
            curve.append({"step": step, "loss": round(sum(window) / len(window), 4)})
            tracker.log_metrics({"train/reading_loss": curve[-1]["loss"]}, step)
            window = []
    held = task.report(eval_screens)
    tracker.log_metrics({"held_out/reading_word": held["reading/word"]["value"]}, steps)
    if ckpt_dir is not None:
        save_checkpoint(ckpt_dir, steps, model, opt, {"kind": "reading", "level": level, "seed": seed},
                        extra_models={task.name: task.module})
    return {"steps": steps, "lr": lr, "batch": batch, "level": level, "seed": seed,
            "train_screens": steps * batch, "held_out_seed": seed + HELD_OUT_OFFSET,
            "held_out": held, "chance": round(1 / len(WORD_CLASSES), 4),
            "curve": curve, "data_cpu_s": round(task.data_s, 1),
            "train_wall_s": round(time.perf_counter() - t_wall, 1), "train_cpu_s": round(time.process_time() - t_cpu, 1)}


__all__ = ["HELD_OUT_OFFSET", "ReadingBatch", "ReadingHead", "ReadingTask", "button_cells", "encode", "score",
           "train_reading"]
