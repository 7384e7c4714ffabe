"""Can the last decoder layer's attention find the named button at all? (learning issue, §1)

Level 1 ("click the <colour> button" among 3-9 buttons on the aligned 4 x 4 board of
`select_task.py`) needs one attention whose query (the answer position) carries the named colour
and whose keys (the visual tokens) carry each button's colour. On a checkpoint, from the frozen
inputs of decoder layer `--layer` (after its input norm), this script reports:

- `heads`: per head of every layer, the attention mass the last prompt position puts on the
  target's visual token, and a linear probe of the target's cell from that head's output;
- `fit`: a fresh q/k pair of the layer's shapes (128 -> 32, q_norm / k_norm), optionally with an
  MLP in front of the key side, trained directly on -log(mass on the target) over the visual
  tokens: the best any attention of this form could do on these features;
- `oracle`: two separate linear colour probes (named colour from the query position, button colour
  from each visual token), matched by the dot product of their softmaxes: whether the information
  for the choice is there at all.
- `--ablate`: greedy level-0 hits with each head's output zeroed (which heads read the position).

    OMP_NUM_THREADS=1 python scripts/experiments/match_probe.py --model venus_core/models/assets/venus-tiny-bootstrap

Prints one JSON line per part.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def _board_items(n: int, data: str):  # type: ignore[no-untyped-def]
    from select_task import aligned_grid_board

    import venus_core.data.synth.generate as synth_generate
    import venus_core.data.synth.tasks as synth_tasks
    from venus_core.data.synth import synthesize
    from venus_core.train.data import load_corpus

    def draw(rng, *, labels):  # type: ignore[no-untyped-def]
        return aligned_grid_board(rng, labels=labels)

    synth_tasks.grid_board = draw  # type: ignore[assignment]
    synth_generate.grid_board = draw  # type: ignore[assignment]
    d = Path(data)
    if not (d / "manifest.json").is_file():
        synthesize("grounding", n, 1, 777001, d, platform="both")
    corpus = load_corpus([d], validation_fraction=0.0, history_len=0, seed=0)
    return [it for v in corpus.train.values() for it in v if getattr(it.record, "box", None) is not None]


def _target_cell(box: tuple[int, int, int, int]) -> int:
    x1, y1, x2, y2 = box
    return min(3, (y1 + y2) * 2 // 1000) * 4 + min(3, (x1 + x2) * 2 // 1000)


def _capture(model, processor, items, layer: int):  # type: ignore[no-untyped-def]
    """Per item: layer `layer`'s normed input (T x H), the visual tokens' positions, the target's index
    among them, per-head masses on the target and per-head outputs at the last position (all layers)."""
    from venus_core.models.generation import prepare_inputs

    layers = model.model.language_model.layers
    head_dim = model.config.text_config.head_dim
    seen: dict[str, object] = {}
    hooks = [layers[layer].self_attn.register_forward_pre_hook(
        lambda mod, args, kwargs: seen.__setitem__("h", kwargs["hidden_states"][0].clone()), with_kwargs=True)]
    for li, block in enumerate(layers):
        hooks.append(block.self_attn.o_proj.register_forward_pre_hook(
            lambda mod, args, li=li: seen.__setitem__(f"o{li}", args[0][0, -1].clone())))
    rows = []
    with torch.no_grad():
        for it in items:
            inputs, _, _ = prepare_inputs(model, processor, [it.example().messages])
            out = model(**inputs, output_attentions=True)
            pos = (inputs["mm_token_type_ids"][0] == 1).nonzero().flatten()
            if len(pos) != 16:
                continue
            cell = _target_cell(it.record.box)
            rows.append({
                "h": seen["h"], "img": pos, "cell": cell, "item": it,
                "mass": [[float(a[0, h, -1, pos[cell]]) for h in range(a.shape[1])] for a in out.attentions],
                "out": [seen[f"o{li}"].view(-1, head_dim) for li in range(len(layers))],  # type: ignore[union-attr]
            })
    for h in hooks:
        h.remove()
    return rows


def _fit_attention(rows, cut: int, *, mlp_key: bool, lr: float, steps: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    width = rows[0]["h"].shape[1]
    torch.manual_seed(0)
    q = torch.nn.Linear(width, 32, bias=False)
    k: torch.nn.Module = torch.nn.Linear(width, 32, bias=False)
    if mlp_key:
        k = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(), torch.nn.Linear(2 * width, width), k)
    qn, kn = torch.nn.RMSNorm(32), torch.nn.RMSNorm(32)
    opt = torch.optim.Adam([*q.parameters(), *k.parameters(), *qn.parameters(), *kn.parameters()], lr=lr)

    def mass(r) -> torch.Tensor:  # type: ignore[no-untyped-def]
        logits = (qn(q(r["h"][-1:])) @ kn(k(r["h"][r["img"]])).T)[0] / 32 ** 0.5
        return torch.softmax(logits, -1)[r["cell"]]

    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        idx = torch.randint(0, cut, (16,), generator=gen)
        loss = -torch.stack([torch.log(mass(rows[int(i)]) + 1e-9) for i in idx]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        train = [float(mass(r)) for r in rows[:cut]]
        test = [float(mass(r)) for r in rows[cut:]]
    return {"mlp_key": mlp_key, "lr": lr, "steps": steps, "train_mass": round(sum(train) / len(train), 3),
            "test_mass": round(sum(test) / len(test), 3)}


def _linear(x: torch.Tensor, y: torch.Tensor, k: int):  # type: ignore[no-untyped-def]
    mu, sd = x.mean(0), x.std(0) + 1e-6
    torch.manual_seed(0)
    w = torch.zeros(x.shape[1], k, requires_grad=True)
    b = torch.zeros(k, requires_grad=True)
    opt = torch.optim.Adam([w, b], lr=0.05)
    for _ in range(300):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(((x - mu) / sd) @ w + b, y) + 1e-3 * (w ** 2).sum()
        loss.backward()
        opt.step()
    return lambda z: (((z - mu) / sd) @ w + b).detach()


def _oracle(rows, cut: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    from colour_probe import _labels

    from venus_core.data.synth.apps.board import BOARD_COLORS

    named, cells = [], []
    for r in rows:
        words = r["item"].record.instruction.lower().split()
        named.append(next((j for j, c in enumerate(BOARD_COLORS) if c in words), -1))
        image = [c for c in r["item"].example().messages[0]["content"] if c["type"] == "image"][0]["image"]
        cells.append(torch.tensor(_labels(image)))
    ok = [i for i in range(cut) if named[i] >= 0]
    fq = _linear(torch.stack([rows[i]["h"][-1] for i in ok]), torch.tensor([named[i] for i in ok]), len(BOARD_COLORS))
    fk = _linear(torch.cat([rows[i]["h"][rows[i]["img"]] for i in range(cut)]), torch.cat(cells[:cut]), len(BOARD_COLORS) + 1)
    hits = total = 0
    for i in range(cut, len(rows)):
        if named[i] < 0:
            continue
        pq = torch.softmax(fq(rows[i]["h"][-1:]), -1)[0]
        pk = torch.softmax(fk(rows[i]["h"][rows[i]["img"]]), -1)[:, : len(BOARD_COLORS)]
        hits += int((pk @ pq).argmax() == rows[i]["cell"])
        total += 1
    return {"oracle_pick": f"{hits}/{total}"}


def _heads(rows, cut: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    from colour_probe import _fit

    y = torch.tensor([r["cell"] for r in rows])
    res: dict[str, object] = {}
    for li in range(len(rows[0]["out"])):
        for h in range(rows[0]["out"][li].shape[0]):
            x = torch.stack([r["out"][li][h] for r in rows])
            res[f"L{li}H{h}"] = {"mass": round(sum(r["mass"][li][h] for r in rows) / len(rows), 3),
                                 "cell_probe": round(_fit(x[:cut], y[:cut], x[cut:], y[cut:], 16), 3)}
    return res


def _ablate(model, processor, spec) -> dict[str, str]:  # type: ignore[no-untyped-def]
    from venus_core.data.synth import synthesize
    from venus_core.train.data import load_corpus
    from venus_core.train.evaluate import evaluate_held_out

    d = Path("/tmp/match-probe-l0")
    if not (d / "manifest.json").is_file():
        synthesize("grounding", 2000, 0, 1000, d, platform="both")
    held = load_corpus([d], validation_fraction=0.05, history_len=spec.data.history_len, seed=0).held_out
    head_dim = model.config.text_config.head_dim
    off: list[tuple[int, int] | None] = [None]

    def zero(li: int):  # type: ignore[no-untyped-def]
        def pre(mod, args):  # type: ignore[no-untyped-def]
            if off[0] is None or off[0][0] != li:
                return None
            x = args[0].clone()
            x[..., off[0][1] * head_dim:(off[0][1] + 1) * head_dim] = 0
            return (x,)
        return pre

    layers = model.model.language_model.layers
    hooks = [block.self_attn.o_proj.register_forward_pre_hook(zero(li)) for li, block in enumerate(layers)]
    res = {}
    for key in [None, *[(li, h) for li in range(len(layers)) for h in range(model.config.text_config.num_attention_heads)]]:
        off[0] = key
        r = evaluate_held_out(model, processor, held, limit=80)["grounding/hit"]
        res["none" if key is None else f"L{key[0]}H{key[1]}"] = f"{r.k}/{r.n}"
    for h in hooks:
        h.remove()
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--layer", type=int, default=-1, help="decoder layer whose inputs the fit and the oracle use")
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--data", default="/tmp/probe-l1/g4")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--ablate", action="store_true")
    args = ap.parse_args()

    from venus_core.config.loader import load_spec
    from venus_core.models.loading import load_model

    torch.set_num_threads(1)
    spec = load_spec("agents/venus-tiny", ["model.attn_implementation=eager"])
    model, processor = load_model(args.model, spec.model, "cpu")
    model.eval()
    layer = args.layer % model.config.text_config.num_hidden_layers
    if args.ablate:
        print(json.dumps({"ablate_level0_hits": _ablate(model, processor, spec)}), flush=True)
    rows = _capture(model, processor, _board_items(args.n, args.data), layer)
    cut = int(0.7 * len(rows))
    print(json.dumps({"model": args.model, "layer": layer, "boards": len(rows), "train": cut}), flush=True)
    print(json.dumps({"heads": _heads(rows, cut)}), flush=True)
    print(json.dumps(_oracle(rows, cut)), flush=True)
    for mlp_key in (False, True):
        print(json.dumps({"fit": _fit_attention(rows, cut, mlp_key=mlp_key, lr=1e-2, steps=args.steps)}), flush=True)


if __name__ == "__main__":
    main()
