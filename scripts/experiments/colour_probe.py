"""Where does the level-1 task break? Linear probes on a tiny checkpoint's hidden states.

Level 1 is "click the <colour> button" among 3-9 coloured buttons. Choosing needs three things:
the image tokens carry each button's colour, the answer position reads the colour word of the
instruction, and the answer position finds the image token whose colour matches. This script
fits linear probes (held-out accuracy, chance level beside it) for:

- `img_colour@L`: the colour of the button under each visual token (10 classes: 9 colours and
  none), from the image tokens' hidden state after decoder layer L (L=0: the text model's input);
- `ask_colour@L`: the named colour, from the last prompt position (where the first answer token
  is predicted) after layer L: is the instruction read at all?
- `ask_cell@L`: which of the 16 visual-token cells holds the target, from the last prompt
  position: has the model chosen?

    OMP_NUM_THREADS=1 python scripts/experiments/colour_probe.py --model venus_core/models/assets/venus-tiny-bootstrap

`--picks` instead generates greedy answers on boards of exactly `--buttons` buttons and counts
where the clicks land (the target, another button, the background; the first button in reading
order), to tell "no choice" from "a fixed rule".

`--text-first` puts the instruction before the screenshot (as scripts/experiments/select_task.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def _labels(image, frame: int = 1000):  # type: ignore[no-untyped-def]
    """Colour class (0..8, 9 = none) of each of the 4 x 4 cells, by the nearest board colour of
    the cell's non-background pixels (the majority colour)."""
    import numpy as np

    from venus_core.data.synth.apps.board import BOARD_COLORS
    from venus_core.data.synth.i18n import COLORS

    a = np.asarray(image.convert("RGB").resize((128, 128)), dtype=np.int32)
    table = np.array([COLORS[c] for c in BOARD_COLORS])  # 9 x 3
    out = []
    for r in range(4):
        for c in range(4):
            cell = a[r * 32:(r + 1) * 32, c * 32:(c + 1) * 32].reshape(-1, 3)
            d = ((cell[:, None, :] - table[None]) ** 2).sum(-1)  # pixels x 9
            near = d.argmin(1)
            ok = d.min(1) < 30 ** 2
            if ok.sum() < 60:
                out.append(9)
            else:
                out.append(int(np.bincount(near[ok], minlength=9).argmax()))
    return out


def _fit(x_tr: torch.Tensor, y_tr: torch.Tensor, x_te: torch.Tensor, y_te: torch.Tensor, k: int,
         steps: int = 300) -> float:
    """Held-out accuracy of a softmax probe (standardised features, L2, Adam, `steps` steps)."""
    mu, sd = x_tr.mean(0), x_tr.std(0) + 1e-6
    x_tr, x_te = (x_tr - mu) / sd, (x_te - mu) / sd
    torch.manual_seed(0)
    w = torch.zeros(x_tr.shape[1], k, requires_grad=True)
    b = torch.zeros(k, requires_grad=True)
    opt = torch.optim.Adam([w, b], lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(x_tr @ w + b, y_tr) + 1e-3 * (w ** 2).sum()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return float(((x_te @ w + b).argmax(1) == y_te).float().mean())


def _explained(x: torch.Tensor, y: torch.Tensor) -> float:
    """Share of the features' total variance (around the mean) that the class means explain:
    how much of the hidden state's size the probed information takes up, raw (not standardised)."""
    total = ((x - x.mean(0)) ** 2).sum()
    means = torch.stack([x[y == k].mean(0) if (y == k).any() else x.mean(0) for k in range(int(y.max()) + 1)])
    between = ((means[y] - x.mean(0)) ** 2).sum()
    return float(between / total)


def _picks(model, processor, items) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Where greedy clicks land on boards of the aligned 4 x 4 grid."""
    import re

    from venus_core.models.generation import generate

    n = {"answers": 0, "unparsed": 0, "target": 0, "other_button": 0, "background": 0,
         "first_in_reading_order": 0, "on_a_button": 0}
    for i in range(0, len(items), 16):
        chunk = items[i:i + 16]
        outs = generate(model, processor, [it.example().messages for it in chunk], 16, 0.0, 1.0)
        for it, out in zip(chunk, outs):
            n["answers"] += 1
            m = re.search(r"\[(\d+),(\d+)\]", out)
            if not m:
                n["unparsed"] += 1
                continue
            x, y = int(m.group(1)), int(m.group(2))
            x1, y1, x2, y2 = it.record.box
            image = [c for c in it.example().messages[0]["content"] if c["type"] == "image"][0]["image"]
            lab = _labels(image)
            cell = min(3, y * 4 // 1000) * 4 + min(3, x * 4 // 1000)
            target = min(3, (y1 + y2) * 2 // 1000) * 4 + min(3, (x1 + x2) * 2 // 1000)
            buttons = [k for k in range(16) if lab[k] != 9]
            key = "target" if cell == target else ("other_button" if cell in buttons else "background")
            n[key] += 1
            if cell in buttons:
                n["on_a_button"] += 1
                n["first_in_reading_order"] += int(cell == min(buttons))
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--data", default="/tmp/probe-l1")
    ap.add_argument("--grid", type=int, choices=(3, 4), default=4)
    ap.add_argument("--text-first", action="store_true")
    ap.add_argument("--picks", action="store_true", help="count where greedy clicks land (see the docstring)")
    ap.add_argument("--buttons", type=int, default=2, help="buttons per board for --picks")
    args = ap.parse_args()

    from select_task import aligned_grid_board, use_text_first  # the sibling script: same board, same order

    if args.text_first:
        use_text_first()
    import venus_core.data.synth.generate as synth_generate
    import venus_core.data.synth.tasks as synth_tasks

    if args.grid == 4:
        def draw(rng, *, labels):  # type: ignore[no-untyped-def]
            return aligned_grid_board(rng, labels=labels, n=args.buttons if args.picks else None)

        synth_tasks.grid_board = draw  # type: ignore[assignment]
        synth_generate.grid_board = draw  # type: ignore[assignment]
    elif args.picks:
        raise SystemExit("--picks needs --grid 4")
    from venus_core.config.loader import load_spec
    from venus_core.data.synth import synthesize
    from venus_core.data.synth.apps.board import BOARD_COLORS
    from venus_core.models.generation import prepare_inputs
    from venus_core.models.loading import load_model
    from venus_core.train.data import load_corpus

    torch.set_num_threads(1)
    spec = load_spec("agents/venus-tiny", [])
    model, processor = load_model(args.model, spec.model, "cpu")
    d = Path(args.data) / (f"g{args.grid}" + (f"-b{args.buttons}" if args.picks else ""))
    if not (d / "manifest.json").is_file():
        synthesize("grounding", args.n, 1, 777001, d, platform="both")
    corpus = load_corpus([d], validation_fraction=0.0, history_len=0, seed=0)
    items = [it for v in corpus.train.values() for it in v if getattr(it.record, "box", None) is not None]
    if args.picks:
        print(json.dumps({"model": args.model, "buttons": args.buttons, **_picks(model, processor, items[:150])}))
        return
    feats: dict[str, list[torch.Tensor]] = {}
    ys: dict[str, list[int]] = {"img": [], "ask_colour": [], "ask_cell": []}
    layers = model.config.text_config.num_hidden_layers
    with torch.no_grad():
        for it in items:
            ex = it.example()
            inputs, _, _ = prepare_inputs(model, processor, [ex.messages])
            out = model(**inputs, output_hidden_states=True)
            hs = out.hidden_states  # layers + 1 tensors, 1 x T x H
            img = inputs["mm_token_type_ids"][0] == 1
            image = [c for c in ex.messages[0]["content"] if c["type"] == "image"][0]["image"]
            lab = _labels(image)
            rec = it.record
            words = rec.instruction.lower().split()
            named = next((i for i, c in enumerate(BOARD_COLORS) if c in words), None)
            if named is None or img.sum() != 16:
                continue
            x1, y1, x2, y2 = rec.box
            cx, cy = (x1 + x2) / 2000, (y1 + y2) / 2000
            cell = min(3, int(cy * 4)) * 4 + min(3, int(cx * 4))
            for li in range(layers + 1):
                feats.setdefault(f"img@{li}", []).append(hs[li][0, img])
                feats.setdefault(f"ask@{li}", []).append(hs[li][0, -1:])
            ys["img"] += lab
            ys["ask_colour"].append(named)
            ys["ask_cell"].append(cell)
    n = len(ys["ask_cell"])
    cut = int(n * 0.7)
    res: dict[str, object] = {"model": args.model, "n_images": n, "text_first": args.text_first, "grid": args.grid}
    y_img = torch.tensor(ys["img"])
    res["chance/img_colour"] = round(float(torch.bincount(y_img[: cut * 16]).max()) / (cut * 16), 3)
    for key, y in (("ask_colour", ys["ask_colour"]), ("ask_cell", ys["ask_cell"])):
        t = torch.tensor(y)
        res[f"chance/{key}"] = round(float(torch.bincount(t[:cut]).max()) / cut, 3)
    for li in range(layers + 1):
        x = torch.cat(feats[f"img@{li}"])
        res[f"img_colour@{li}"] = round(_fit(x[: cut * 16], y_img[: cut * 16], x[cut * 16:], y_img[cut * 16:], 10), 3)
        res[f"img_colour_var@{li}"] = round(_explained(x, y_img), 4)
        x = torch.cat(feats[f"ask@{li}"])
        for key in ("ask_colour", "ask_cell"):
            t = torch.tensor(ys[key])
            res[f"{key}@{li}"] = round(_fit(x[:cut], t[:cut], x[cut:], t[cut:], 16), 3)
            res[f"{key}_var@{li}"] = round(_explained(x.squeeze(1) if x.dim() == 3 else x, t), 4)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
