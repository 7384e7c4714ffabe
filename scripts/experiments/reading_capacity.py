"""Which tiny vision tower can read a level-2 button's word when trained for it directly?

Level 2 ("click the "Send" button" among 3-9 labelled buttons of random colours) stays at the
random-button level, and linear probes on the tiny model's visual tokens read the button's colour
but not its word (docs/learning.md, "Level 2: the button's word is not in its visual token").
Before a re-bootstrap of the tiny model with a bigger vision tower, this asks whether any tiny
configuration CAN read the word at all: a freshly initialised Qwen3-VL vision tower, built and
initialised exactly as `venus_core.models.tiny.build_tiny` builds it (the same `tiny_config`,
seed and `_init_vision_path`; the tower is the full model's `.model.visual`), with the project's
image processor (`venus_core.models.processor.image_processor`, the pixel bounds of the spec), is
trained end to end with a linear word classifier on top.

Data: level-2 boards drawn and rendered by the project's generator
(`venus_core.data.synth.generate._Ctx` / `sample_screen` / `render`, mobile and web as
`synthesize(..., platform="both")`), every labelled button of a screen one example: (screen,
button box, word index among the 15 `WORDS`, colour index among the 9 `BOARD_COLORS`). Training
screens come from seed 778000 as a stream of fresh screens, each seen once (16 per step: 3,000
steps = 48,000 screens, ~280,000 buttons); `--train-screens N` trains on a fixed set of N screens
instead (1,000 screens = 5,862 buttons were memorised, not read: see docs/learning.md). Held-out:
200 screens (1,218 buttons) from seed 778100. The project trains on seeds < 1000, its eval
suites use 700000-700999, label_probe.py 777002. A 256 x 256 arm renders the SAME boards
(same per-screen generator) at 256 x 256 through `render`'s size argument; note the renderer's
5-px font floor: at 128 px every label is 5 px high, at 256 px web labels stay 5 px (layout width
720) while mobile labels grow to 11 px (layout width 360).

Readout: the mean of the merged visual tokens (the vision tower's output, what the text model
sees) whose cell overlaps the central half of the button's box (where the word is drawn), then a
non-affine LayerNorm (the text model's layers start with an RMSNorm) and a linear layer over the
15 words. Tower and classifier are trained together with Adam (batch `--batch` screens, all their
buttons), cross-entropy; held-out word accuracy with a 95 % Wilson interval at a few step counts.
Buttons of one screen share platform and theme, so the interval (which assumes independent
buttons) is somewhat optimistic. `--task colour` trains the same way on the colour instead (the
control: the current tower should read colour).

    OMP_NUM_THREADS=1 python scripts/experiments/reading_capacity.py --arms A,C,D,B
    OMP_NUM_THREADS=1 python scripts/experiments/reading_capacity.py --arms A --steps 3000,4000,5000,6000
    OMP_NUM_THREADS=1 python scripts/experiments/reading_capacity.py --arms A --task colour --steps 100,250,500
    OMP_NUM_THREADS=1 python scripts/experiments/reading_capacity.py --arms P128,P256 --steps 500,1500

Arms: A = today's tower (hidden 64, depth 2, patch 16, merge 2, 128 x 128: 16 visual tokens);
B = hidden 128; C = patch 8 at 128 x 128 (64 tokens, 16-px cells); D = 256 x 256 screens, patch 16
(64 tokens); E = depth 4; F = A with transformers' position-table init (std 0.02 instead of the
project's 3.0, which makes the position code ~5x the RMS of a patch's pixel features at init);
P128 / P256 = the pixel control (no tower: an MLP on the raw crop around the button's centre, to
tell "not in the pixels" from "not learned"). Prints one JSON line per evaluation and per arm
(and per `--lrs` value), then a markdown table. ~0.05 CPU-s per step for A (+0.025 to render and
encode the fresh screens), 0.11 for B and C, 0.20 for D (+0.05).
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch

from venus_core.eval.metrics import wilson
from venus_core.train.reading import button_cells

ARMS: dict[str, dict[str, int]] = {
    "A": {},
    "B": {"vision_hidden_size": 128},
    "C": {"patch_size": 8},
    "D": {"image_size": 256},
    "E": {"vision_depth": 4},
    "F": {"vision_pos_init_std": 0.02},
}
DESCRIBE = {"A": "today: hidden 64, depth 2, patch 16, 128 px", "B": "hidden 128",
            "C": "patch 8 (16-px cells)", "D": "256 x 256 screens", "E": "depth 4",
            "F": "A with position table std 0.02 (transformers' default)"}


Screens = list[tuple[object, str, list[tuple[tuple[int, int, int, int], int, int]]]]


def boards(seed: int, n: int, size: int, start: int = 0) -> Screens:
    """`n` level-2 screens rendered at size x size: (image, platform, [(box 0-1000, word, colour)])."""
    from venus_core.data.synth.apps.board import BOARD_COLORS, WORDS
    from venus_core.data.synth.generate import _Ctx, sample_screen
    from venus_core.data.synth.phone import norm_box
    from venus_core.data.synth.render import render

    words = {w[0]: j for j, w in enumerate(WORDS)} | {w[1]: j for j, w in enumerate(WORDS)}
    out = []
    for i in range(start, start + n):
        rng = random.Random(f"{seed}:reading:2:{i}")
        c = _Ctx(rng, 2, "both", (size, size))
        _, _, screen = sample_screen(rng, 2, c.view)
        buttons = [(norm_box(w.box, c.view), words[w.label], BOARD_COLORS.index(w.color_name))
                   for w in screen.widgets if w.key.startswith("btn:") and w.label in words]
        out.append((render(screen, c.size, c.theme), c.platform, buttons))
    return out


def build_tower(over: dict[str, int]):  # type: ignore[no-untyped-def]
    """The tiny model's vision tower for TinyModelSpec(**over), built and initialised as build_tiny."""
    from transformers import AutoModelForImageTextToText

    from venus_core.config.spec import TinyModelSpec
    from venus_core.models.processor import image_processor
    from venus_core.models.tiny import _init_vision_path, tiny_config
    from venus_core.models.tokenizer import (
        ENDOFTEXT,
        IM_END,
        IMAGE_PAD,
        VIDEO_PAD,
        VISION_END,
        VISION_START,
    )

    spec = TinyModelSpec(**over)
    ids = {t: 600 + k for k, t in enumerate((ENDOFTEXT, IM_END, IMAGE_PAD, VIDEO_PAD, VISION_START, VISION_END))}
    config = tiny_config(spec, ids, spec.vocab_size)  # token ids only matter to the text model
    config.dtype = torch.float32
    torch.manual_seed(spec.seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    _init_vision_path(model, spec)
    proc = image_processor(patch_size=spec.patch_size, merge_size=spec.spatial_merge_size,
                           min_pixels=min(32 * 32, spec.image_size ** 2), max_pixels=spec.image_size ** 2)
    return spec, model.model.visual, proc


def encode(proc, screens, spec):  # type: ignore[no-untyped-def]
    """Pixel values per screen (the processor's), the merged grid side, and per-button pooling cells."""
    px, cells, labels = [], [], []
    side = None
    for img, platform, buttons in screens:
        b = proc(images=[img], return_tensors="pt")
        _, h, w = (int(v) for v in b["image_grid_thw"][0])
        gh, gw = h // spec.spatial_merge_size, w // spec.spatial_merge_size
        side = (gh, gw)
        px.append(b["pixel_values"])
        per = []
        for box, word, colour in buttons:
            per.append(button_cells(box, gh, gw))
            labels.append((word, colour, platform == "mobile"))
        cells.append(per)
    return torch.stack(px), side, cells, labels


def run_arm(name: str, lr: float, task: str, train, test, steps: list[int], batch: int,
            seed: int) -> dict[str, object]:
    """Train arm `name` on `train[size]` (a fixed list of screens) or, when `train` is None, on a
    stream of fresh screens (batch j = screens j*batch .. of seed 778000, every screen seen once)."""
    from venus_core.data.synth.apps.board import BOARD_COLORS, WORDS

    over = ARMS[name]
    spec, tower, proc = build_tower(over)
    t0 = time.process_time()
    te_px, side, te_cells, te_lab = encode(proc, test[spec.image_size], spec)
    if train is not None:
        tr_px, _, tr_cells, tr_lab = encode(proc, train[spec.image_size], spec)
    enc_s = time.process_time() - t0
    ntok = side[0] * side[1]
    grid = torch.tensor([[1, side[0] * spec.spatial_merge_size, side[1] * spec.spatial_merge_size]])
    k = len(WORDS) if task == "word" else len(BOARD_COLORS)
    yi = 0 if task == "word" else 1
    torch.manual_seed(seed)
    head = torch.nn.Sequential(torch.nn.LayerNorm(spec.hidden_size, elementwise_affine=False),
                               torch.nn.Linear(spec.hidden_size, k))
    params = list(tower.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=lr)
    n_tower = sum(p.numel() for p in tower.parameters())

    def offsets(cells):  # button -> first label index of its screen
        o, acc = [], 0
        for per in cells:
            o.append(acc)
            acc += len(per)
        return o

    te_off = offsets(te_cells)
    if train is not None:
        tr_off = offsets(tr_cells)

    def forward(px, cells, idx):  # logits of every button of screens idx
        x = px[idx].reshape(-1, px.shape[-1])
        merged = tower(x, grid_thw=grid.repeat(len(idx), 1)).pooler_output  # (len(idx)*ntok, hidden)
        rows, cols, vals = [], [], []
        r = 0
        for j, s in enumerate(idx):
            for per in cells[s]:
                for c in per:
                    rows.append(r)
                    cols.append(j * ntok + c)
                    vals.append(1.0 / len(per))
                r += 1
        pool = torch.sparse_coo_tensor(torch.tensor([rows, cols]), torch.tensor(vals), (r, merged.shape[0]))
        return head(torch.sparse.mm(pool, merged))

    def targets(lab, off, cells, idx):
        ys, mob = [], []
        for s in idx:
            for b in range(len(cells[s])):
                ys.append(lab[off[s] + b][yi])
                mob.append(lab[off[s] + b][2])
        return torch.tensor(ys), torch.tensor(mob)

    def evaluate(px, cells, lab, off, limit: int | None = None) -> dict[str, object]:
        tower.eval()
        hits, n, mh, mn = 0, 0, 0, 0
        m = len(cells) if limit is None else min(limit, len(cells))
        with torch.no_grad():
            for a in range(0, m, 32):
                idx = list(range(a, min(m, a + 32)))
                y, mob = targets(lab, off, cells, idx)
                ok = forward(px, cells, idx).argmax(1) == y
                hits += int(ok.sum())
                n += len(y)
                mh += int(ok[mob].sum())
                mn += int(mob.sum())
        tower.train()
        lo, hi = wilson(hits, n)
        return {"acc": round(hits / n, 3), "ci95": [round(lo, 3), round(hi, 3)], "n": n,
                "mobile": round(mh / max(1, mn), 3), "web": round((hits - mh) / max(1, n - mn), 3)}

    g = torch.Generator().manual_seed(seed)
    curve = []
    train_s = data_s = 0.0
    last_loss = float("nan")
    seen = 0
    for step in range(1, max(steps) + 1):
        if train is None:  # fresh screens: render and encode this batch
            t1 = time.process_time()
            tr_px, _, tr_cells, tr_lab = encode(proc, boards(778000, batch, spec.image_size, start=seen), spec)
            tr_off = offsets(tr_cells)
            seen += batch
            idx = list(range(batch))
            data_s += time.process_time() - t1
        else:
            idx = torch.randint(0, len(tr_cells), (batch,), generator=g).tolist()
        t1 = time.process_time()
        y, _ = targets(tr_lab, tr_off, tr_cells, idx)
        loss = torch.nn.functional.cross_entropy(forward(tr_px, tr_cells, idx), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        train_s += time.process_time() - t1
        last_loss = 0.9 * last_loss + 0.1 * loss.item() if step > 1 else loss.item()
        if step in steps:
            held = evaluate(te_px, te_cells, te_lab, te_off)
            # fitting vs generalising (fresh stream: the last batch, just trained on)
            fit = evaluate(tr_px, tr_cells, tr_lab, tr_off, limit=200)
            curve.append({"step": step, **held, "train_acc": fit["acc"], "loss": round(last_loss, 3)})
            print(json.dumps({"arm": name, "lr": lr, **curve[-1]}), flush=True)
    return {"arm": name, "config": DESCRIBE[name], "task": task, "lr": lr, "spec": over,
            "tower_params": n_tower, "visual_tokens": ntok, "chance": round(1 / k, 3),
            "train_buttons": len(tr_lab) if train is not None else "fresh",
            "train_screens": len(tr_cells) if train is not None else seen,
            "cpu_s_per_step": round(train_s / max(steps), 4), "cpu_s_train": round(train_s, 1),
            "cpu_s_encode": round(enc_s, 1), "cpu_s_data": round(data_s, 1), "curve": curve}


def pixel_control(task: str, train, test, steps: list[int], size: int, seed: int) -> dict[str, object]:
    """Is the word in the rendered pixels at all? An MLP (one hidden layer of 256) on the raw RGB
    crop around the button's centre (40 x 16 px at 128 px, scaled with the screen), no vision tower."""
    import numpy as np

    from venus_core.data.synth.apps.board import BOARD_COLORS, WORDS

    cw, ch = 40 * size // 128, 16 * size // 128

    def crops(screens):  # type: ignore[no-untyped-def]
        xs, ys, mob = [], [], []
        for img, platform, buttons in screens:
            a = np.asarray(img.convert("RGB"), dtype=np.float32) / 127.5 - 1.0
            a = np.pad(a, ((ch, ch), (cw, cw), (0, 0)))
            for (x1, y1, x2, y2), word, colour in buttons:
                cx, cy = round((x1 + x2) / 2 * size / 1000), round((y1 + y2) / 2 * size / 1000)
                xs.append(torch.from_numpy(a[cy + ch // 2:cy + ch // 2 + ch, cx + cw // 2:cx + cw // 2 + cw].copy()).flatten())
                ys.append(word if task == "word" else colour)
                mob.append(platform == "mobile")
        return torch.stack(xs), torch.tensor(ys), torch.tensor(mob)

    x_tr, y_tr, _ = crops(train[size])
    x_te, y_te, m_te = crops(test[size])
    k = len(WORDS) if task == "word" else len(BOARD_COLORS)
    torch.manual_seed(seed)
    mlp = torch.nn.Sequential(torch.nn.Linear(x_tr.shape[1], 256), torch.nn.GELU(), torch.nn.Linear(256, k))
    opt = torch.optim.Adam(mlp.parameters(), lr=1e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    curve, t_s = [], 0.0
    for step in range(1, max(steps) + 1):
        t1 = time.process_time()
        idx = torch.randint(0, len(y_tr), (96,), generator=g)
        loss = torch.nn.functional.cross_entropy(mlp(x_tr[idx]), y_tr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        t_s += time.process_time() - t1
        if step in steps:
            with torch.no_grad():
                ok = mlp(x_te).argmax(1) == y_te
                fit = float((mlp(x_tr[:1200]).argmax(1) == y_tr[:1200]).float().mean())
            hits, n = int(ok.sum()), len(ok)
            lo, hi = wilson(hits, n)
            curve.append({"step": step, "acc": round(hits / n, 3), "ci95": [round(lo, 3), round(hi, 3)], "n": n,
                          "mobile": round(float(ok[m_te].float().mean()), 3),
                          "web": round(float(ok[~m_te].float().mean()), 3), "train_acc": round(fit, 3),
                          "loss": round(loss.item(), 3)})
            print(json.dumps({"arm": f"P{size}", **curve[-1]}), flush=True)
    return {"arm": f"P{size}", "config": f"pixel control: MLP on the {cw}x{ch}-px crop, {size} px screens",
            "task": task, "lr": 1e-3, "spec": {}, "tower_params": 0, "visual_tokens": 0,
            "chance": round(1 / k, 3), "train_buttons": len(y_tr), "train_screens": len(train[size]),
            "cpu_s_per_step": round(t_s / max(steps), 4), "cpu_s_train": round(t_s, 1), "cpu_s_encode": 0.0,
            "curve": curve}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arms", default="A,B,C,D")
    ap.add_argument("--task", choices=("word", "colour"), default="word")
    ap.add_argument("--lrs", default="0.001")
    ap.add_argument("--steps", default="250,500,1000,2000,3000")
    ap.add_argument("--batch", type=int, default=16, help="screens per step (all their buttons)")
    ap.add_argument("--train-screens", type=int, default=0,
                    help="a fixed training set of this many screens (0: a fresh stream, each screen seen once)")
    ap.add_argument("--test-screens", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    arms = args.arms.split(",")
    steps = [int(s) for s in args.steps.split(",")]
    sizes = {int(a[1:]) if a.startswith("P") else ARMS[a].get("image_size", 128) for a in arms}
    t0 = time.process_time()
    train = {s: boards(778000, args.train_screens, s) for s in sizes} if args.train_screens else None
    test = {s: boards(778100, args.test_screens, s) for s in sizes}
    render_s = time.process_time() - t0
    results = []
    for arm in arms:
        if arm.startswith("P"):
            fixed = train or {s: boards(778000, 1000, s) for s in sizes}  # the control needs a fixed set
            results.append(pixel_control(args.task, fixed, test, steps, int(arm[1:]), args.seed))
            print(json.dumps(results[-1]), flush=True)
            continue
        for lr in (float(x) for x in args.lrs.split(",")):
            r = run_arm(arm, lr, args.task, train, test, steps, args.batch, args.seed)
            r["cpu_s_render_all"] = round(render_s, 1)
            print(json.dumps(r), flush=True)
            results.append(r)
    cols = " | ".join(f"{s} steps" for s in steps)
    print(f"\n| arm | config | task | lr | tower params | visual tokens | {cols} | best mobile / web "
          "| train acc (last) | CPU-s/step | CPU-s |")
    print("|" + "---|" * (10 + len(steps)))
    for r in results:
        cells = " | ".join(f"{c['acc']:.3f} [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]"
                           for c in r["curve"])  # type: ignore[union-attr]
        best = max(r["curve"], key=lambda c: c["acc"])  # type: ignore[arg-type]
        last = r["curve"][-1]  # type: ignore[index]
        print(f"| {r['arm']} | {r['config']} | {r['task']} | {r['lr']} | {r['tower_params']:,} | "
              f"{r['visual_tokens']} | {cells} | {best['mobile']:.3f} / {best['web']:.3f} | "
              f"{last['train_acc']:.3f} | {r['cpu_s_per_step']} | {r['cpu_s_train']} |")
    n = results[0]["curve"][0]["n"] if results else 0  # type: ignore[index]
    print(f"\nn = {n} held-out buttons per cell; chance {results[0]['chance'] if results else '-'}; "
          f"rendering {render_s:.0f} CPU-s")


if __name__ == "__main__":
    main()
