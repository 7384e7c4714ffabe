"""The reading stage: labelled screens, the pooling cells, and training that moves only the vision tower."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from venus_core.data.synth.reading import WORD_CLASSES, labelled_screens
from venus_core.train.reading import button_cells, encode

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


def _png(img) -> bytes:  # type: ignore[no-untyped-def]
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def test_labelled_screens_are_seeded_per_screen_and_labelled() -> None:
    five = labelled_screens(11, 5)
    again = labelled_screens(11, 2, start=3)
    assert [_png(s.image) for s in again] == [_png(s.image) for s in five[3:]]  # screen i depends only on (seed, i)
    assert [s.buttons for s in again] == [s.buttons for s in five[3:]]
    assert _png(labelled_screens(12, 1)[0].image) != _png(five[0].image)
    for s in five:  # level 2: 3-9 buttons, every one labelled, words distinct on a screen
        assert 3 <= len(s.buttons) <= 9 and s.image.size == (128, 128) and s.platform in ("mobile", "web")
        words = [w for _, w in s.buttons]
        assert len(set(words)) == len(words) and all(0 <= w < len(WORD_CLASSES) for w in words)
        assert all(0 <= x1 < x2 <= 1000 and 0 <= y1 < y2 <= 1000 for (x1, y1, x2, y2), _ in s.buttons)
    assert all(len(s.buttons) <= 1 for s in labelled_screens(11, 6, level=0))  # level 0: one button, labelled or not
    with pytest.raises(ValueError, match="boards"):
        labelled_screens(11, 1, level=3)


def test_labelled_screens_off_the_grid_and_mixed() -> None:
    grid = labelled_screens(11, 4)
    free = labelled_screens(11, 4, layout="free")
    mixed = labelled_screens(11, 4, layout="mixed")
    # mixed: even screens are the grid's (byte for byte), odd ones the free stream's
    assert [_png(s.image) for s in mixed] == [_png(grid[0].image), _png(free[1].image), _png(grid[2].image),
                                              _png(free[3].image)]
    sizes = set()
    for s in free:  # free boards: 2-6 buttons, all labelled, words distinct, boxes of many sizes off the 3 x 3 grid
        assert 2 <= len(s.buttons) <= 6
        words = [w for _, w in s.buttons]
        assert len(set(words)) == len(words)
        sizes |= {(x2 - x1, y2 - y1) for (x1, y1, x2, y2), _ in s.buttons}
    assert len(sizes) > 4
    grid_sizes = {(x2 - x1, y2 - y1) for s in grid for (x1, y1, x2, y2), _ in s.buttons}
    assert not sizes <= grid_sizes
    with pytest.raises(ValueError, match="reading layout must be one of"):
        labelled_screens(11, 1, layout="scatter")
    with pytest.raises(ValueError, match="level-1/2 boards"):
        labelled_screens(11, 1, level=0, layout="free")


def test_button_cells_cover_the_central_half() -> None:
    # 4 x 4 grid of 250-wide cells; the central half of (0,0)-(500,500) is 125..375: cells 0,1 of rows 0,1
    assert button_cells((0, 0, 500, 500), 4, 4) == [0, 1, 4, 5]
    assert button_cells((500, 750, 1000, 1000), 4, 4) == [14, 15]  # rows 3 only (812..937)
    assert button_cells((0, 0, 1000, 1000), 2, 2) == [0, 1, 2, 3]


def test_encode_pools_each_button_over_its_own_screen() -> None:
    from venus_core.models.processor import image_processor

    proc = image_processor(patch_size=16, merge_size=2, min_pixels=32 * 32, max_pixels=128 * 128)
    screens = labelled_screens(3, 3)
    b = encode(proc, screens, 2)
    assert b is not None and b.grid_thw.tolist() == [[1, 8, 8]] * 3  # 128 px / 16 = 8 patches, 4 x 4 merged
    n = sum(len(s.buttons) for s in screens)
    assert b.labels.tolist() == [w for s in screens for _, w in s.buttons] and b.pool.shape == (n, 3 * 16)
    dense = b.pool.to_dense()
    assert torch.allclose(dense.sum(1), torch.ones(n))  # a mean per button
    first = len(screens[0].buttons)
    assert dense[:first, 16:].abs().sum() == 0 and dense[first:, :16].abs().sum() == 0  # only its own screen's tokens
    bare = next(s for s in labelled_screens(3, 40, level=0) if not s.buttons)  # level 0 labels half its buttons
    assert encode(proc, [bare], 2) is None and encode(proc, [], 2) is None
    one_by_one = torch.cat([proc(images=[s.image], return_tensors="pt")["pixel_values"] for s in screens])
    assert torch.equal(b.pixel_values, one_by_one)  # one processor call for the batch, the same patches


@pytest.mark.slow
def test_reading_moves_only_the_vision_tower_and_checkpoints(train_tiny_dir: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from venus_core.config.loader import load_spec
    from venus_core.models.loading import load_model, vision_tower
    from venus_core.train.reading import train_reading

    spec = load_spec(SPEC)
    model, processor = load_model(train_tiny_dir, spec.model, "cpu", training=True)
    model.train()
    tower_ids = {id(p) for p in vision_tower(model).parameters()}
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    names = dict(model.named_parameters())
    report = train_reading(model, processor, steps=3, lr=1e-3, seed=5, batch=2, eval_screens=4, log_every=2,
                           ckpt_dir=tmp_path / "ckpt")
    moved = {k for k, v in model.named_parameters() if not torch.equal(v, before[k])}
    assert moved and all(id(names[k]) in tower_ids for k in moved)  # the text model is untouched
    assert any(".visual." in f".{k}" for k in moved)
    held = report["held_out"]["reading/word"]
    assert held["n"] == sum(len(s.buttons) for s in labelled_screens(5 + 500_000, 4)) and 0 <= held["k"] <= held["n"]
    assert [c["step"] for c in report["curve"]] == [2, 3] and report["train_screens"] == 6
    saved = load_file(str(tmp_path / "ckpt" / "step-00000003" / "model.safetensors"))
    assert all(torch.equal(saved[k], v.detach()) for k, v in model.state_dict().items() if k in saved)
    assert (tmp_path / "ckpt" / "step-00000003" / "reading_head.safetensors").is_file()
    seed = next(k for k in range(100) if not labelled_screens(k, 1, level=0)[0].buttons)
    with pytest.raises(ValueError, match="no labelled button"):  # a clear error, not a silent no-op
        train_reading(model, processor, steps=1, lr=1e-3, seed=seed, level=0, batch=1, eval_screens=1)
    from venus_core.train.reading import ReadingTask
    from venus_core.train.sft import freeze_vision

    freeze_vision(model)
    with pytest.raises(ValueError, match="frozen"):
        ReadingTask(model, processor, weight=1.0, seed=1)


def _sft_with_reading(tiny: Path, data: Path, ckpt: Path, **kw: object):  # type: ignore[no-untyped-def]
    from venus_core.config.spec import MixtureSpec, ModelSpec
    from venus_core.config.training import MidTrainSpec
    from venus_core.models.loading import load_model
    from venus_core.train.data import load_corpus
    from venus_core.train.distributed import DistEnv
    from venus_core.train.reading import ReadingTask
    from venus_core.train.sft import train_sft
    from venus_core.train.tracker import MemoryTracker

    model, proc = load_model(tiny, ModelSpec())
    corpus = load_corpus([data], validation_fraction=0.1, history_len=5, seed=0)
    rng = torch.get_rng_state()
    task = ReadingTask(model, proc, weight=0.5, seed=9, batch=2)
    assert torch.equal(torch.get_rng_state(), rng)  # its classifier's seeded init leaves the caller's RNG alone
    tracker = MemoryTracker()
    cfg = MidTrainSpec(max_steps=4, batch_size=2, lr=2e-3, warmup_steps=1, save_every=2, eval_every=100, seed=1,
                       freeze_vision=bool(kw.pop("freeze_vision", False)))
    env = kw.pop("env", DistEnv(0, 1, 0, torch.device("cpu"), "single"))
    res = train_sft(model, proc, corpus, MixtureSpec(perception=0, vqa=0, grounding=1, navigation=0), cfg, env,
                    ckpt_dir=ckpt, tracker=tracker, eval_limit=1, aux_tasks=[task], **kw)  # type: ignore[arg-type]
    return model, task, res, tracker


@pytest.mark.slow
def test_reading_beside_grounding_is_logged_checkpointed_and_resumes_exactly(
        train_tiny_dir: Path, grounding_l0: Path, tmp_path: Path) -> None:
    from venus_core.train.distributed import DistEnv

    straight, task, res, tracker = _sft_with_reading(train_tiny_dir, grounding_l0, tmp_path / "a")
    assert res.steps == 4 and [s for s, _ in tracker.series("train/reading_head_loss")] == [4]
    assert (tmp_path / "a" / "step-00000004" / "reading_head.safetensors").is_file()
    head0 = {k: v.clone() for k, v in task.module.state_dict().items()}
    _sft_with_reading(train_tiny_dir, grounding_l0, tmp_path / "b", stop_at=2)
    resumed, task_b, _, _ = _sft_with_reading(train_tiny_dir, grounding_l0, tmp_path / "b", resume=True)
    a, c = straight.state_dict(), resumed.state_dict()
    assert all(torch.equal(a[k], c[k]) for k in a)  # the reading stream is indexed by step: a resume reads the same screens
    assert all(torch.equal(head0[k], v) for k, v in task_b.module.state_dict().items())
    with pytest.raises(ValueError, match="single process"):
        _sft_with_reading(train_tiny_dir, grounding_l0, tmp_path / "c", env=DistEnv(0, 2, 0, torch.device("cpu"), "ddp"))
    with pytest.raises(ValueError, match="freeze_vision"):  # reading trains the tower: a frozen one is refused
        _sft_with_reading(train_tiny_dir, grounding_l0, tmp_path / "d", freeze_vision=True)
