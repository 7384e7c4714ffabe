"""Diagnostic experiments behind docs/learning.md (the image-path initialisation and coordinate
curriculum findings, 2026-11-29, commit fb7e4cf): does the tiny Qwen3-VL read position?

Usage: OMP_NUM_THREADS=1 [ENV...] python scripts/experiments/position_probe.py
Task: a 24x24 square on a 128x128 screen, answer its quarter-column `[0]`..`[3]` (prompt `[x,y]?`);
prints held-out answer loss with real and blank screens every 50 steps.
Knobs (env): STEPS, LR, DSEED (data seed);
  HOOK=a      add a random per-token-index code of RMS a after the merger (control);
  POSINIT=normal:s | sincos:a   re-initialise the vision position table;
  SCALE=g     multiply the merger output by g (and the deepstack mergers unless DSKEEP=1); NODS=1 no deepstack;
  GPROMPT=1   the UI-Venus grounding prompt; XY=1 answer `[x,y]` in 0-1000 instead of the column;
  DATA=DIR    level-0 grounding records of a Venus dataset instead of squares (COL=1 column answer;
              QUANT=4 targets snapped to a 4x4 grid; SWITCH=N exact targets from step N; greedy
              held-out hit rate on the last 128 records every EVERY=100 steps).
The tiny model is built with the current `model.tiny` defaults (init fix included), so SCALE=1 and
no POSINIT reproduce the shipped behaviour.
"""
import os, sys, time, random, torch, shutil, math
torch.set_num_threads(1)
from pathlib import Path
from PIL import Image, ImageDraw
from venus_core.models.batches import collate, Example
from venus_core.models.prompts import build_messages
from venus_core.models.loading import load_model
from venus_core.config.spec import ModelSpec
from venus_core.train.schedule import cosine_with_warmup
steps = int(os.environ.get("STEPS", 300)); lr = float(os.environ.get("LR", 2e-3))
import json, glob
DATA = os.environ.get("DATA")
RECS = []
if DATA:
    for f in sorted(glob.glob(DATA + "/shards/*.jsonl")):
        RECS += [json.loads(l) for l in open(f)]
    RECS = [r for r in RECS if not r.get("refusal")]
    EVAL = RECS[-128:]; RECS = RECS[:-128]
    print("records", len(RECS))
def sample_data(rng, blank=False):
    from venus_core.models.prompts import grounding_prompt
    r = rng.choice(RECS); h = r["image"].split(":")[1]
    img = Image.open(f"{DATA}/images/{h[:2]}/{h}.png").convert("RGB")
    if blank: img = Image.new("RGB", img.size, img.getpixel((0, 0)))
    x1, y1, x2, y2 = r["box"]
    ins = r["instruction"] if not os.environ.get("NOINS") else "the button"
    cx, cy = (x1+x2)//2, (y1+y2)//2
    q = int(os.environ.get("QUANT", 0))
    if q and rng is not EVALRNG:
        cell = 1000 // q; cx = min(q - 1, cx // cell) * cell + cell // 2; cy = min(q - 1, cy // cell) * cell + cell // 2
    ans = f"[{cx},{cy}]" if not os.environ.get("COL") else f"[{min(3, (x1+x2)//2 // 250)}]"
    return Example(build_messages(img, grounding_prompt(ins)), ans)
EVALRNG = object()
def hit_eval():
    from venus_core.models.generation import generate
    from venus_core.models.prompts import grounding_prompt
    import re
    model.eval(); msgs = []; boxes = []
    for r in EVAL:
        h = r["image"].split(":")[1]
        img = Image.open(f"{DATA}/images/{h[:2]}/{h}.png").convert("RGB")
        msgs.append(build_messages(img, grounding_prompt(r["instruction"]))); boxes.append(r["box"])
    outs = []
    for i in range(0, len(msgs), 32):
        outs += generate(model, proc, msgs[i:i+32], max_new_tokens=12)
    model.train(); k = 0
    for o, (x1, y1, x2, y2) in zip(outs, boxes):
        m = re.search(r"\[(\d+),(\d+)\]", o)
        if m and x1 <= int(m.group(1)) <= x2 and y1 <= int(m.group(2)) <= y2: k += 1
    return f"hit {k}/{len(boxes)} e.g. {outs[:3]}"
def sample(rng, blank=False):
    if DATA: return sample_data(rng, blank)
    img = Image.new("RGB", (128, 128), (255, 255, 255))
    w = h = 24; x, y = rng.randint(0, 128 - w), rng.randint(0, 128 - h)
    if not blank: ImageDraw.Draw(img).rectangle([x, y, x + w - 1, y + h - 1], fill=tuple(rng.randint(0, 200) for _ in range(3)))
    cx = int((x + w / 2) / 128 * 1000)
    cy = int((y + h / 2) / 128 * 1000)
    from venus_core.models.prompts import grounding_prompt
    prompt = grounding_prompt("the square") if os.environ.get("GPROMPT") else "[x,y]?"
    ans = f"[{cx},{cy}]" if os.environ.get("XY") else f"[{min(3, cx // 250)}]"
    return Example(build_messages(img, prompt), ans)
tdir = Path(f"/tmp/exp/tiny{os.getpid()}"); shutil.rmtree(tdir, ignore_errors=True)
model, proc = load_model("tiny", ModelSpec(), tiny_dir=tdir); model.train()
amp = float(os.environ.get("HOOK", 0))
if amp:
    g = torch.Generator().manual_seed(1); code = torch.randn(16, 128, generator=g) * amp
    def hook(mod, inp, out):
        n = out.shape[0] // 16
        return out + code.repeat(n, 1)
    model.model.visual.merger.register_forward_hook(hook)
pi = os.environ.get("POSINIT")
if pi:
    kind, a = pi.split(":"); a = float(a); W = model.model.visual.pos_embed.weight
    n = int(W.shape[0] ** 0.5); d = W.shape[1]
    with torch.no_grad():
        if kind == "normal":
            torch.manual_seed(5); W.normal_(0, a)
        else:
            ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
            q = d // 4; freq = 1.0 / (100 ** (torch.arange(q) / q))
            ax = xs.reshape(-1, 1).float() * freq; ay = ys.reshape(-1, 1).float() * freq
            W.copy_(torch.cat([ax.sin(), ax.cos(), ay.sin(), ay.cos()], 1) * a)
    print("pos init", pi, "row norm", W.norm(dim=1).mean().item())
sc = float(os.environ.get("SCALE", 0))
if sc:
    model.model.visual.merger.register_forward_hook(lambda m, i, o: o * sc)
    if not os.environ.get("DSKEEP"):
        for dm in model.model.visual.deepstack_merger_list: dm.register_forward_hook(lambda m, i, o: o * sc)
if os.environ.get("NODS"):
    model.model.visual.deepstack_visual_indexes = []
opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
sch = cosine_with_warmup(opt, 30, steps, 0.1)
rng = random.Random(int(os.environ.get("DSEED", 0)))
def held():
    model.eval(); out = []
    with torch.no_grad():
        for blank in (False, True):
            hr = random.Random(123)
            out.append(round(model(**collate([sample(hr, blank) for _ in range(48)], proc)).loss.item(), 3))
    model.train(); return out
t0 = time.time()
for s in range(1, steps + 1):
    b = collate([sample(rng) for _ in range(16)], proc)
    loss = model(**b).loss; opt.zero_grad(); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); sch.step()
    if DATA and s % int(os.environ.get("EVERY", 100)) == 0: print("EVAL", s, hit_eval(), flush=True)
    if os.environ.get("SWITCH") and s == int(os.environ["SWITCH"]): os.environ["QUANT"] = "0"; print("switch to exact", flush=True)
    if s % 50 == 0: print(f"step {s} train {loss.item():.3f} held real/blank {held()} {time.time()-t0:.0f}s", flush=True)
shutil.rmtree(tdir, ignore_errors=True)
