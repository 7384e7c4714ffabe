"""Does the tiny model learn to pick the button the instruction names? (learning issue, §1)

From random init: level-0 grounding with coarse targets, then exact targets (the first two
`venus bootstrap` stages), then level-1 (3-9 coloured buttons, pick by colour) with a share of
level-0 records replayed, scoring the held-out level-1 split every `--eval-every` steps (hits on
answerable samples and refusal accuracy) and level 0 at the end (forgetting).

Knobs: `--grid 3` is the board as the synthetic world draws it (a 3 x 3 grid of buttons, which
straddles the 4 x 4 grid of visual tokens of a 128 px screen); `--grid 4` puts each button inside
one visual token's cell (a 4 x 4 board), so choosing a button is choosing a token. `--vision-width`
is `model.tiny.vision_hidden_size`.

    OMP_NUM_THREADS=1 python scripts/experiments/select_task.py --work /tmp/sel-g4 --grid 4

Prints one line per evaluation and writes WORK/select.json.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch


def aligned_grid_board(rng: random.Random, *, labels: bool, n: int | None = None,  # type: ignore[no-untyped-def]
                       cells: tuple[int, ...] | None = None):
    """3-9 buttons on a 4 x 4 board whose cells are the 4 x 4 visual tokens of a square screen
    (`cells`: always these cells, only the colours vary)."""
    from venus_core.data.synth.apps.board import BOARD_COLORS, WORDS, BoardButton, BoardState

    n = len(cells) if cells else (n if n is not None else rng.randint(3, 9))
    cells = sorted(cells) if cells else sorted(rng.sample(range(16), n))
    colors = rng.sample(BOARD_COLORS, n) if not labels else [rng.choice(BOARD_COLORS) for _ in range(n)]
    words = rng.sample(range(len(WORDS)), n) if labels else [-1] * n
    buttons = []
    for cell, color, word in zip(cells, colors, words, strict=True):
        r, c = divmod(cell, 4)
        x1, y1 = 25 + c * 250 + rng.randint(-10, 10), 30 + r * 250 + rng.randint(-10, 10)
        buttons.append(BoardButton(color, (x1, y1, x1 + 200, y1 + 190), word))
    return BoardState(tuple(buttons))


def use_text_first() -> None:
    """Put the instruction before the screenshot in the user turn (patches `build_messages`; call it
    before anything imports the name)."""
    import venus_core.models.prompts as prompts

    plain = prompts.build_messages

    def text_first(image, prompt, answer=None):  # type: ignore[no-untyped-def]
        msgs = plain(image, prompt, answer)
        msgs[0]["content"] = msgs[0]["content"][::-1]
        return msgs

    prompts.build_messages = text_first  # type: ignore[assignment]


def supervise_attention(model, processor, *, weight: float, layer: int, heads: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Add `weight` x (-log attention mass on the target's visual token) of `heads` to the training loss.

    The query positions are those that predict the answer tokens; the target token is the visual token
    whose cell holds the answer point (parsed from the labels). Needs `model.attn_implementation=eager`.
    """
    import functools
    import re

    tok = processor.tokenizer
    image_id = int(model.config.image_token_id)
    merge = int(model.config.vision_config.spatial_merge_size)
    plain = model.forward

    @functools.wraps(plain)  # generate() inspects the signature
    def forward(*args, **kw):  # type: ignore[no-untyped-def]
        labels = kw.get("labels")
        if labels is None or not model.training:
            return plain(*args, **kw)
        out = plain(*args, output_attentions=True, **kw)
        att = out.attentions[layer][:, heads]
        ids, grids = kw["input_ids"], kw["image_grid_thw"]
        terms = []
        for b in range(ids.shape[0]):
            ans = (labels[b] != -100).nonzero().flatten()
            m = re.search(r"\[(\d+),\s*(\d+)\]", tok.decode(labels[b][ans]))
            if m is None:
                continue
            gh, gw = int(grids[b][1]) // merge, int(grids[b][2]) // merge
            col, row = min(gw - 1, int(m[1]) * gw // 1000), min(gh - 1, int(m[2]) * gh // 1000)
            pos = (ids[b] == image_id).nonzero().flatten()
            if len(pos) != gh * gw:
                raise ValueError(f"sample {b}: {len(pos)} visual tokens, grid {gh}x{gw}")
            mass = att[b, :, ans - 1, pos[row * gw + col]]
            terms.append(-torch.log(mass.clamp_min(1e-6)).mean())
        if terms:
            extra = torch.stack(terms).mean()
            supervise_attention.last = float(extra.detach())  # type: ignore[attr-defined]
            out.loss = out.loss + weight * extra
        return out

    model.forward = forward


def supervise_query(model, processor, *, weight: float, layer: int = 1, tokens: bool = False) -> None:  # type: ignore[no-untyped-def]
    """Add `weight` x cross-entropy of a linear head that reads the instruction's colour from the input of
    decoder layer `layer` at the positions predicting the answer (labels on the query side of the match).
    `tokens`: the head predicts the instruction's tokens instead (a soft target spread evenly over them,
    no knowledge of colours: the general form)."""
    import functools
    import re

    from venus_core.data.synth.apps.board import BOARD_COLORS

    colour = re.compile(r"\b(" + "|".join(BOARD_COLORS) + r")\b")
    tok = processor.tokenizer
    vocab = len(tok)
    head = torch.nn.Linear(model.config.text_config.hidden_size, vocab if tokens else len(BOARD_COLORS))
    model.add_module("venus_query_probe", head)
    plain = model.forward

    @functools.wraps(plain)
    def forward(*args, **kw):  # type: ignore[no-untyped-def]
        labels = kw.get("labels")
        if labels is None or not model.training:
            return plain(*args, **kw)
        out = plain(*args, output_hidden_states=True, **kw)
        hs = out.hidden_states[layer]
        ids = kw["input_ids"]
        terms = []
        for b in range(ids.shape[0]):
            ans = (labels[b] != -100).nonzero().flatten()
            prompt = tok.decode(ids[b][: int(ans[0])])
            if tokens:
                m = re.search(r"instruction:\s*(.*?)\s*\n\nThe output", prompt, re.S)
                if m is None:
                    continue
                hot = torch.zeros(vocab)
                hot[tok(m[1], add_special_tokens=False)["input_ids"]] = 1.0
                logits = head(hs[b, ans - 1])  # soft-target cross-entropy: the instruction's tokens share the mass
                terms.append(-(torch.log_softmax(logits, -1) * (hot / hot.sum())).sum(-1).mean())
                continue
            m = colour.search(prompt.split("instruction:")[-1])
            if m is None:
                continue
            target = torch.full((len(ans),), BOARD_COLORS.index(m[1]))
            terms.append(torch.nn.functional.cross_entropy(head(hs[b, ans - 1]), target))
        if terms:
            extra = torch.stack(terms).mean()
            supervise_attention.last = float(extra.detach())  # type: ignore[attr-defined]
            out.loss = out.loss + weight * extra
        return out

    model.forward = forward


class _Print:
    """Prints held-out rates as training logs them."""

    def log_params(self, params: object) -> None:
        pass

    def log_metrics(self, metrics: dict, step: int) -> None:  # type: ignore[type-arg]
        shown = {k: round(v, 3) for k, v in metrics.items() if k.startswith("eval/") and k.endswith(("hit", "refusal"))}
        if shown:
            print(json.dumps({"l1_step": step, **shown}), flush=True)
        elif "train/loss" in metrics and step % 100 == 0:
            print(json.dumps({"l1_step": step, "loss": round(metrics["train/loss"], 4),
                              "attn": round(getattr(supervise_attention, "last", float("nan")), 3)}), flush=True)

    def log_artifact(self, path: object, name: object = None) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--grid", type=int, choices=(3, 4), default=3)
    ap.add_argument("--vision-width", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--l0-steps", default="500,200")
    ap.add_argument("--l1-steps", type=int, default=1500)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--replay", type=float, default=0.2, help="share of level-0 records in the level-1 stage")
    ap.add_argument("--l1-coarse", type=int, default=0, help="snap level-1 targets to this grid's cell centres")
    ap.add_argument("--eval-limit", type=int, default=200)
    ap.add_argument("--set", action="append", default=[], help="agent-spec override, e.g. model.tiny.merger_output_gain=10")
    ap.add_argument("--init", default="", help="start from this checkpoint (with --l0-steps 0,0: no level-0 stages)")
    ap.add_argument("--l1-buttons", type=int, default=0,
                    help="level-1 boards with exactly this many buttons (0 = 3-9); the usual 3-9 level-1 split is scored at the end")
    ap.add_argument("--qk-lr-mult", type=float, default=1.0,
                    help="learning-rate multiplier of the text model's q_proj/k_proj (all stages)")
    ap.add_argument("--l1-cells", default="", help="level-1 boards with buttons always in these cells, e.g. 5,6")
    ap.add_argument("--l1-lr", type=float, default=0.0, help="level-1 stage learning rate (0 = mid_train.lr)")
    ap.add_argument("--text-first", action="store_true",
                    help="put the instruction before the screenshot in the user turn (image tokens can attend to it)")
    ap.add_argument("--attn-sup", type=float, default=0.0,
                    help="weight of an attention-supervision loss: one head's attention from the answer to the target's visual token")
    ap.add_argument("--attn-layer", type=int, default=-1)
    ap.add_argument("--attn-heads", default="0", help="comma-separated heads of --attn-layer")
    ap.add_argument("--l1-qa", type=float, default=0.0,
                    help="share of level-1 perception questions (colour / text / kind of the element in a region) in the level-1 stage")
    ap.add_argument("--query-sup", type=float, default=0.0,
                    help="weight of a named-colour head on the last layer's input at the answer positions")
    ap.add_argument("--query-tokens", action="store_true",
                    help="--query-sup predicts the instruction's tokens (multi-hot), not the named colour")
    ap.add_argument("--train-only", default="", help="regex: train only the parameters whose name matches")
    args = ap.parse_args()

    if args.text_first:  # before anything imports build_messages by name
        use_text_first()

    import venus_core.data.synth.generate as synth_generate
    import venus_core.data.synth.tasks as synth_tasks
    from venus_core.config.loader import load_spec
    from venus_core.data.synth import synthesize
    from venus_core.models.loading import load_model
    from venus_core.train.bootstrap import GROUNDING_ONLY
    from venus_core.train.data import Corpus, coarse_targets, load_corpus
    from venus_core.train.distributed import DistEnv
    from venus_core.train.evaluate import evaluate_held_out
    from venus_core.train.sft import train_sft

    if args.grid != 4 and (args.l1_buttons or args.l1_cells):
        raise SystemExit("--l1-buttons / --l1-cells need --grid 4")

    def use_board(n: int | None) -> None:
        """Patch the board drawer (both modules that draw boards import it by name)."""
        if args.grid != 4:
            return
        cells = tuple(int(c) for c in args.l1_cells.split(",")) if (n and args.l1_cells) else None

        def draw(rng, *, labels):  # type: ignore[no-untyped-def]
            return aligned_grid_board(rng, labels=labels, n=n, cells=cells)

        synth_tasks.grid_board = draw  # type: ignore[assignment]
        synth_generate.grid_board = draw  # type: ignore[assignment]

    use_board(None)
    torch.set_num_threads(1)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    spec = load_spec("agents/venus-tiny", [f"model.tiny.vision_hidden_size={args.vision_width}",
                                           f"model.tiny.seed={args.seed}", *args.set])
    if args.init:
        model, processor = load_model(args.init, spec.model, "cpu")
        model.train()
    else:
        model, processor = load_model("tiny", spec.model, "cpu", tiny_dir=work / "init")
    env = DistEnv(0, 1, 0, torch.device("cpu"), "single")
    if args.train_only:
        import re

        for name, param in model.named_parameters():
            param.requires_grad_(re.search(args.train_only, name) is not None)
        print(json.dumps({"trainable": sum(p.numel() for p in model.parameters() if p.requires_grad)}), flush=True)
    if args.query_sup:
        supervise_query(model, processor, weight=args.query_sup, tokens=args.query_tokens)
    if args.attn_sup:
        supervise_attention(model, processor, weight=args.attn_sup, layer=args.attn_layer,
                            heads=[int(h) for h in args.attn_heads.split(",")])
    if args.qk_lr_mult != 1.0:  # train_sft builds torch.optim.AdamW(params, lr=...): split its params
        qk = {id(p) for n, p in model.named_parameters()
              if "language_model" in n and (".q_proj." in n or ".k_proj." in n)}
        adamw = torch.optim.AdamW

        def grouped(params, lr, **kw):  # type: ignore[no-untyped-def]
            params = list(params)
            return adamw([{"params": [p for p in params if id(p) not in qk], "lr": lr},
                          {"params": [p for p in params if id(p) in qk], "lr": lr * args.qk_lr_mult}], lr=lr, **kw)

        torch.optim.AdamW = grouped  # type: ignore[misc,assignment]

    def data(level: int, n: int, seed: int, tag: str = "", kind: str = "grounding") -> Path:
        d = work / f"{kind}-level{level}{tag}-n{n}-s{seed}"
        if not (d / "manifest.json").is_file():
            synthesize(kind, n, level, seed, d, platform="both")  # type: ignore[arg-type]
        return d

    def corpus(*dirs: Path) -> Corpus:
        return load_corpus(list(dirs), validation_fraction=0.05, history_len=spec.data.history_len, seed=0)

    def cfg(steps: int, k: int, eval_every: int, lr: float = 0.0):  # type: ignore[no-untyped-def]
        return spec.mid_train.model_copy(update={"lr": lr or spec.mid_train.lr,
            "max_steps": steps, "eval_every": eval_every, "save_every": steps,
            "warmup_steps": min(spec.mid_train.warmup_steps, max(0, steps // 4)), "seed": spec.mid_train.seed + k})

    log: list[dict[str, object]] = []
    t0 = time.process_time()

    def note(stage: str, rates: dict, step: int) -> None:  # type: ignore[type-arg]
        row = {"stage": stage, "step": step, "cpu_s": round(time.process_time() - t0),
               **{k: f"{r.k}/{r.n}" for k, r in rates.items()}}
        log.append(row)
        print(json.dumps(row), flush=True)
        (work / "select.json").write_text(json.dumps({"args": vars(args), "log": log}, indent=1))

    l0 = corpus(data(0, 2000, 1000))
    coarse, exact = (int(s) for s in args.l0_steps.split(","))
    if coarse:
        c0, _ = coarse_targets(l0, 4)
        r = train_sft(model, processor, c0, GROUNDING_ONLY, cfg(coarse, 0, coarse), env, ckpt_dir=work / "ck0",
                      eval_limit=args.eval_limit)
        note("l0-coarse", r.rates, coarse)
    if exact:
        r = train_sft(model, processor, l0, GROUNDING_ONLY, cfg(exact, 1, exact), env, ckpt_dir=work / "ck1",
                      eval_limit=args.eval_limit)
        note("l0-exact", r.rates, exact)
    if not (coarse or exact):
        note("init", evaluate_held_out(model, processor, l0.held_out, limit=args.eval_limit), 0)

    l1_all = corpus(data(1, 8000, 1001))
    if args.l1_cells and not args.l1_buttons:
        args.l1_buttons = len(args.l1_cells.split(","))
    if args.l1_buttons:
        use_board(args.l1_buttons)
        l1 = corpus(data(1, 8000, 1001, tag=f"b{args.l1_buttons}" + (f"c{args.l1_cells.replace(',', '-')}" if args.l1_cells else "")))
        use_board(None)
    else:
        l1 = l1_all
    n_replay = round(args.replay / max(1e-9, 1 - args.replay) * sum(len(v) for v in l1.train.values()))
    train = {d: list(v) for d, v in l1.train.items()}
    if args.l1_coarse:
        train = coarse_targets(Corpus(train=train, held_out={}, sources=[]), args.l1_coarse, keep_refusals=True)[0].train
    if n_replay:
        pool = [it for v in l0.train.values() for it in v]
        random.Random(args.seed).shuffle(pool)
        train["grounding"] = train.get("grounding", []) + (pool * (1 + n_replay // max(1, len(pool))))[:n_replay]
    mixture = GROUNDING_ONLY
    if args.l1_qa:
        from venus_core.config.spec import MixtureSpec

        qa = corpus(data(1, 8000, 1101, kind="vqa"))
        train["perception"] = list(qa.train["perception"])
        mixture = MixtureSpec(perception=args.l1_qa, vqa=0.0, grounding=1.0 - args.l1_qa, navigation=0.0)
    stage = Corpus(train=train, held_out=l1.held_out, sources=list(l1.sources))
    r = train_sft(model, processor, stage, mixture, cfg(args.l1_steps, 2, args.eval_every, args.l1_lr), env,
                  ckpt_dir=work / "ck2", eval_limit=args.eval_limit, tracker=_Print())
    for h in r.history:
        print(json.dumps({"l1": h}), flush=True)
    note("l1", r.rates, args.l1_steps)
    note("l0-after", evaluate_held_out(model, processor, l0.held_out, limit=args.eval_limit), args.l1_steps)
    if args.l1_buttons:
        note("l1-3to9-after", evaluate_held_out(model, processor, l1_all.held_out, limit=args.eval_limit), args.l1_steps)
    (work / "select.json").write_text(json.dumps({"args": vars(args), "log": log,
                                                  "l1_history": r.history}, indent=1, default=str))
    model.save_pretrained(work / "model")
    processor.save_pretrained(work / "model")


if __name__ == "__main__":
    main()
