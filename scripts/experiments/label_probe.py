"""Is a level-2 button's word in the model's visual token at all? (learning issue, level 2)

Level 2 ("click the "Send" button" among 3-9 labelled buttons of random colours) stayed at the
random-button level after 4,000 steps with the instruction head that solved level 1. This script
asks whether the perception half is there: on fresh level-2 boards (seed 777002, none of the
training or held-out seeds), it takes the hidden state of the visual token under the target
button's centre (the 4 x 4 merged-token grid of a 128 x 128 screen) at the text model's input
(layer 0) and at the last decoder layer's input, and fits two linear probes (70/30 split,
standardised features, Adam, 400 steps): the button's word (15 classes, chance 6.7 %) and, as the
control that shows the probe works, the button's colour (9 classes, read from the pixels).

    OMP_NUM_THREADS=1 python scripts/experiments/label_probe.py --model venus_core/models/assets/venus-tiny-bootstrap

Prints one JSON line: per probe and layer, the held-out accuracy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from colour_probe import _fit  # the same softmax probe (this script runs from scripts/experiments)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=700)
    ap.add_argument("--data", default="/tmp/label-probe-l2")
    args = ap.parse_args()

    from PIL import Image

    from venus_core.config.loader import load_spec
    from venus_core.data.synth import synthesize
    from venus_core.data.synth.apps.board import BOARD_COLORS, WORDS
    from venus_core.data.synth.i18n import COLORS
    from venus_core.models.generation import prepare_inputs
    from venus_core.models.loading import load_model
    from venus_core.train.data import load_corpus

    torch.set_num_threads(1)
    d = Path(args.data)
    if not (d / "manifest.json").is_file():
        synthesize("grounding", args.n, 2, 777002, d, platform="both")
    items = [it for v in load_corpus([d], validation_fraction=0.0, history_len=0, seed=0).train.values()
             for it in v if getattr(it.record, "box", None) is not None]
    model, processor = load_model(args.model, load_spec("agents/venus-tiny").model, "cpu")
    model.eval()
    feats: dict[str, list[torch.Tensor]] = {"layer0": [], "last": []}
    words: list[int] = []
    colours: list[int] = []
    with torch.no_grad():
        for it in items:
            ins = it.record.instruction
            word = next((j for j, (w, _) in enumerate(WORDS) if f"\u201c{w}\u201d" in ins or f'"{w}"' in ins), -1)
            if word < 0:  # a refusal or a colour-named single button
                continue
            messages = it.example().messages
            inputs, _, _ = prepare_inputs(model, processor, [messages])
            hs = model(**inputs, output_hidden_states=True).hidden_states
            pos = (inputs["mm_token_type_ids"][0] == 1).nonzero().flatten()
            if len(pos) != 16:
                continue
            x1, y1, x2, y2 = it.record.box
            cell = min(3, (y1 + y2) * 2 // 1000) * 4 + min(3, (x1 + x2) * 2 // 1000)
            feats["layer0"].append(hs[0][0, pos[cell]])
            feats["last"].append(hs[-1][0, pos[cell]])
            words.append(word)
            img = next(c["image"] for c in messages[0]["content"] if c["type"] == "image")
            img = img if isinstance(img, Image.Image) else Image.open(img).convert("RGB")
            px = img.getpixel((int((x1 + 8) * img.size[0] / 1000), int((y1 + y2) / 2 * img.size[1] / 1000)))
            colours.append(min(range(len(BOARD_COLORS)),
                               key=lambda j: sum((a - b) ** 2 for a, b in zip(px, COLORS[BOARD_COLORS[j]], strict=True))))
    cut = int(0.7 * len(words))
    out: dict[str, object] = {"model": args.model, "buttons": len(words), "train": cut,
                              "chance": {"word": round(1 / len(WORDS), 3), "colour": round(1 / len(BOARD_COLORS), 3)}}
    for name, y, k in (("word", words, len(WORDS)), ("colour", colours, len(BOARD_COLORS))):
        for layer, xs in feats.items():
            x, t = torch.stack(xs), torch.tensor(y)
            out[f"{name}_{layer}"] = round(_fit(x[:cut], t[:cut], x[cut:], t[cut:], k, steps=400), 3)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
