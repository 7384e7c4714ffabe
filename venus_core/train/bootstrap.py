"""`venus bootstrap`: pre-train the tiny base on the synthetic curriculum, once, and ship it.

Why: measured on 2 CPU cores (docs/learning_mid_train.md), a tiny
Qwen3-VL from random init learns the answer format in a minute and "one target on screen" in five,
but choosing the element the *instruction* names needs 15–30 CPU-minutes. A laptop mid-training run
should not pay that every time, so this command trains the tiny model through curriculum levels
0 → 1 → 2 (one button; pick the named one by colour among 3-9; by its label) and the levels' tasks
as navigation episodes, and writes a few-MB HF checkpoint that `model.base: bootstrap` points at.

Each stage synthesises its own data with seeds (1000 + level) that differ from every seed the
embedded agent spec trains or evaluates on, trains with a fresh AdamW and cosine schedule, and
scores its held-out split. Departure: the paper starts from released Qwen3-VL weights; this
bootstrap only stands in for that pre-training at toy scale.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from venus_core.config.spec import AgentSpec, MixtureSpec
from venus_core.train.tracker import NullTracker, Tracker

GROUNDING_ONLY = MixtureSpec(perception=0.0, vqa=0.0, grounding=1.0, navigation=0.0)
READING_SEED = 3000  # + 10 * stage index: the reading task's screen stream (its held-out screens: + 500,000)


@dataclass(frozen=True)
class Extra:
    """More records for a stage, of another level, platform or screen size than its own data."""

    level: int
    n: int
    platform: str = "both"  # mobile | web | both
    size: tuple[int, int] | None = None  # (width, height); None = the level's curriculum size
    miniwob: tuple[str, ...] = ()  # MiniWoB++ tasks: `n` oracle episodes of each, collected in headless Chromium
    # (page seeds from the extra's seed; `level` and `size` do not apply) instead of synthetic records
    kind: str = ""  # synth kind of the records; "" = the stage's (a navigation stage may take fresh grounding records)
    misses: int = 0  # MiniWoB++ recovery episodes: this many deliberate misses (history only), then the oracle's click
    layout: str = "grid"  # level-1/2 grounding boards: "grid" or "free" (buttons of random size and place)

    def __post_init__(self) -> None:  # a wrong layout fails when the plan is made, not hours later at its stage
        from venus_core.data.synth.apps.board import LAYOUTS

        if self.layout not in LAYOUTS:
            raise ValueError(f"bootstrap: Extra.layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.layout != "grid" and (self.miniwob or self.level not in (1, 2)):
            raise ValueError(f"bootstrap: Extra.layout {self.layout!r} is for synthetic level-1/2 boards, "
                             f"not {'MiniWoB++ episodes' if self.miniwob else f'level {self.level}'}")
        from venus_core.envs.miniwob_collect import MAX_MISSES

        if not 0 <= self.misses <= MAX_MISSES or (self.misses and not self.miniwob):
            raise ValueError(f"bootstrap: Extra.misses must be in [0, {MAX_MISSES}] and only for MiniWoB++ "
                             f"episodes, got {self.misses!r}" + ("" if self.miniwob else " on synthetic records"))


@dataclass(frozen=True)
class Stage:
    level: int
    kind: str  # synth kind: grounding | mixture | navigation; or reading (train/reading.py: the vision tower reads
    # the buttons' words on fresh level-`level` boards, nothing synthesised to disk)
    n: int  # records to synthesise (reading: fresh screens per step)
    steps: int  # optimizer steps
    mixture: MixtureSpec | None = None  # None = the agent spec's mixture
    coarse_grid: int = 0  # > 0: grounding targets snapped to a grid x grid cell centre (curriculum)
    head: float = 0.0  # weight of the instruction head (mid_train.instruction_head) in this stage; 0 = off
    replay: float = 0.0  # share of the stage's training records drawn from the lower levels' training data
    lr: float = 0.0  # peak learning rate; 0 = the spec's mid_train.lr (DEFAULT_STAGES set theirs: the
    # shipped checkpoint must not change when an agent spec retunes its mid-training)
    attend: float = 0.0  # weight of attention supervision (mid_train.attention_supervision) in this stage; 0 = off
    extra: tuple[Extra, ...] = ()  # more records of the same kind, synthesised with seeds 1100 + 10 * stage + i
    seed: int = 0  # synthesis seed of the stage's own records; 0 = 1000 + level (a stage may want fresh records of a level)
    read: float = 0.0  # weight of the reading task (train/reading.py) beside the stage's own loss: the vision tower reads
    # the words of 16 fresh level-2 boards a step (seed 3000 + 10 * stage index); 0 = off
    refusal: float = 0.0  # share of the stage's synthesised grounding records (its own and its extras') that name an
    # element absent from the screen (answer [-1,-1]); 0 = the synthesis default (data/synth REFUSAL_SHARE, 10 %)
    read_layout: str = "grid"  # where the reading task's buttons sit: grid | free | mixed (data/synth/reading.py)
    replay_refusal: float = 0.0  # share of the replayed items that are refusals (drawn apart); 0 = as the pool holds them
    think: str = "goal"  # think style of the stage's synthesised navigation steps (its own and its extras'): goal | brief
    # (data/synth/describe.THINKS; "brief" names the step without restating the task)

    def __post_init__(self) -> None:
        from venus_core.data.synth.describe import THINKS
        from venus_core.data.synth.reading import READING_LAYOUTS

        if self.think not in THINKS:
            raise ValueError(f"bootstrap: Stage.think must be one of {THINKS}, got {self.think!r}")

        if not 0.0 <= self.refusal <= 1.0:
            raise ValueError(f"bootstrap: Stage.refusal must be in [0, 1], got {self.refusal!r}")
        if not 0.0 <= self.replay_refusal <= 1.0 or (self.replay_refusal and not self.replay):
            raise ValueError(f"bootstrap: Stage.replay_refusal must be in [0, 1] and needs replay > 0, got "
                             f"{self.replay_refusal!r} with replay {self.replay!r}")
        if self.read_layout not in READING_LAYOUTS:
            raise ValueError(f"bootstrap: Stage.read_layout must be one of {READING_LAYOUTS}, got {self.read_layout!r}")


# the MiniWoB++ tasks of the plan's oracle and recovery episodes (single-screen clicks)
MINIWOB_EASY = ("click-test", "click-test-2", "click-color")
_READING = Stage(2, "grounding", 8000, 4000, GROUNDING_ONLY, head=1.0, replay=0.2, lr=1e-3, read=1.0,
                 extra=(Extra(0, 4000),), refusal=0.3)
# the level-2 navigation stages: level-0/1 episodes and fresh level-0/1 grounding records beside,
# 30 % of their grounding records refusals
_LEVEL2_BESIDE = (Extra(0, 2000), Extra(1, 2000), Extra(0, 1000, kind="grounding"), Extra(1, 1000, kind="grounding"))
_LEVEL2_FORMAT = Stage(2, "navigation", 4000, 600, None, head=1.0, replay=0.3, lr=1e-3, read=1.0,
                       extra=_LEVEL2_BESIDE, refusal=0.3)
_LEVEL2_ATTEND = replace(_LEVEL2_FORMAT, steps=400, attend=1.0, seed=1201,
                         extra=(*_LEVEL2_BESIDE, Extra(0, 300, "web", miniwob=MINIWOB_EASY),
                                Extra(0, 150, "web", miniwob=MINIWOB_EASY, misses=1)))
# the level-2 consolidation stages (as stage 7 for level 1): 90 % of each batch grounding rows, half the lr
_LEVEL2_CONSOLIDATE = replace(_LEVEL2_ATTEND, steps=600, mixture=MixtureSpec(perception=0.0, vqa=0.0, grounding=0.9,
                                                                            navigation=0.1),
                              replay=0.6, lr=5e-4, seed=1205)

DEFAULT_STAGES: tuple[Stage, ...] = (
    Stage(0, "grounding", 2000, 2400, GROUNDING_ONLY, coarse_grid=4, lr=2e-3),
    Stage(0, "grounding", 2000, 600, GROUNDING_ONLY, lr=2e-3),
    Stage(1, "grounding", 8000, 4000, GROUNDING_ONLY, head=1.0, replay=0.2, lr=1e-3),
    Stage(1, "grounding", 8000, 2000, GROUNDING_ONLY, head=1.0, replay=0.2, lr=1e-3),
    Stage(1, "navigation", 4000, 600, None, head=1.0, replay=0.3, lr=1e-3),
    Stage(1, "navigation", 4000, 400, None, head=1.0, replay=0.3, lr=1e-3, attend=1.0,
          extra=(Extra(0, 2000),), seed=1201),
    Stage(1, "navigation", 4000, 300, MixtureSpec(perception=0.0, vqa=0.0, grounding=0.6, navigation=0.4),
          head=1.0, replay=0.5, lr=5e-4, attend=1.0, extra=(Extra(0, 2000),), seed=1201),
    Stage(1, "navigation", 4000, 600, MixtureSpec(perception=0.0, vqa=0.0, grounding=0.9, navigation=0.1),
          head=1.0, replay=0.6, lr=5e-4, attend=1.0, extra=(Extra(0, 2000),), seed=1202),
    Stage(1, "navigation", 4000, 400, MixtureSpec(perception=0.0, vqa=0.0, grounding=0.5, navigation=0.5),
          head=1.0, replay=0.5, lr=5e-4, attend=1.0, seed=1203,
          extra=(Extra(0, 2000), Extra(0, 300, "web", miniwob=MINIWOB_EASY))),
    _READING,
    _READING,
    _READING,
    _LEVEL2_FORMAT,
    _LEVEL2_ATTEND,
    replace(_LEVEL2_ATTEND, seed=1204),
    _LEVEL2_CONSOLIDATE,
    replace(_LEVEL2_CONSOLIDATE, seed=1206),
)
"""Coarse-to-fine on one target (level 0, targets first snapped to a 4 x 4 grid, then exact), then
pick by colour (level 1) in two runs of its cosine schedule (a fresh warm-up and decay over the same
screens, in a new order), then level 1's single-screen tasks as navigation episodes (stages 4-8,
below), then pick by label (level 2, stages 9-16): three runs of a level-2 grounding schedule with
the reading task beside it (`Stage.read`: the tiny vision tower did not read the labels, a linear
probe on its token under the target found the word at chance level and level-2 grounding stayed near
14 %; 30 % of these stages' records name an absent element, so that refusals survive them), then
level 2's single-screen tasks as navigation episodes as stages 4-5 do for level 1: the format stage,
then the same stage with attention supervision, twice, on fresh episodes with MiniWoB++ oracle
episodes beside (after the grounding-only runs the format stage alone left the live click at the
random-button level; `scripts/experiments/reading_consolidate.py`, docs/learning.md) and MiniWoB++
recovery episodes (a first click that misses, kept as history, then the oracle's click: without
them two thirds of the MiniWoB++ steps after these stages were invalid, the step after a miss),
then two consolidation stages on the same kind of data with 90 % of each batch grounding rows at
half the learning rate (stages 15-16, as stage 7 for level 1: the attention stages had cost held-out
grounding, level 2 85 -> 64 %, level-1 refusals 66 -> 39 of 89; after these two level 2 73 %,
level-1 refusals 73 of 89, while live level 2 (74.5 -> 78.0 %) and MiniWoB++ click-test
(67.5 -> 74.5 %) were kept, their gains inside the intervals at n = 200; one such stage at 60 %
moved nothing; scripts/experiments/level2_consolidate.py, docs/learning.md).
Level 3 (app screens, the full mixture) is not trained here: the level-3 mixture at lr 2e-3 undid levels 0-1
(level 0 86 -> 40 %, level 1 99 -> 78 % on held-out screens); mid-training trains the four-domain
mixture anyway. Measured (docs/learning.md): exact targets
from random init left the answers independent of the image for 1,200 steps; 400 coarse steps
then 100 exact ones reached 67 % held-out hits on level 0 (94.5 % after 400). Leaving the coarse
plateau is stochastic (250 to > 450 steps over data seeds; at commit c1c9ac7 seed 0 was still on it
after 800 coarse + 300 exact steps, 15/76 hits, and reached 75 % after 2,400 coarse and 97 % after
600 exact), hence 2,400 + 600. Data:
45 passes over 384 level-0 records gave answer loss 0.55 on them and 2.28 on unseen screens, so
data must grow with steps; synthesis is cheap next to training (the shipped run's report: 9.4 s
for 8,000 level-1 screens, 13 s for 1,200 level-3 mixture records).
Levels 1-3 train with the instruction head (`mid_train.instruction_head`: without it level 1 stayed
at the random-button level for thousands of steps) and replay lower-level grounding records (level 0
was forgotten otherwise); level 1 reached 100 % of 3-9-button boards and 94 % refusals after 2,400
steps at lr 1e-3 with the head, hence 4,000; breaking out of the random-button level within them
is not reliable (97.5 % in one run, 77.9 % in another with other level-0 screens), and 2,000 more
took the weaker run to 98.8 % (level 0 84 -> 92 %, false refusals 3/321) (docs/learning.md). Then
level 1's single-screen tasks as navigation episodes (the UI-Venus action format, Click then
Finished) with the level's grounding replayed: the grounding skill alone did not give valid live
actions, 150 steps did not teach the format (parse 0/64) and 600 did (64/64). Then the same task on
fresh level-1 episodes (seed 1201) plus 2,000 level-0 ones, with attention supervision
(`mid_train.attention_supervision`): after the navigation stage the clicks followed the goal's colour
word, not the screen (attention mass on the image 0.021 in the navigation prompt vs 0.54 in the
grounding one), so live level-1 boards were won at the random-button level (14.5 %); 400 supervised
steps took them to 83.5 % (the same steps without the term: 16.5 %), but cost the grounding format
(held-out level 0 89.6 -> 56.9 %, level-1 refusals 94 -> 22 %). Then two consolidation stages at half
the learning rate on the same tasks with more grounding in each batch (60 %, then 90 % of the rows;
replay 50 / 60 %), attention supervision still on: live level 1 -> 98.5 %, level 0 26.5 -> 40.5 %,
held-out grounding level 0 -> 73.4 %, level-1 refusals -> 85 %. A grounding-only stage instead
restored grounding (level 0 91.7 %) and destroyed the navigation format (live level 1: 200/200
episodes invalid), so navigation rows stay in every batch. Last, the same kind of stage with
MiniWoB++ oracle episodes of the level-0/1 web tasks beside the boards (click-test, click-test-2,
click-color; 300 each, collected in headless Chromium): before it every answer on a MiniWoB++ page
was invalid (the click is read from board-like visual tokens), after it MiniWoB++ click-test 0 ->
68.5 % with no invalid step, live level 1 100 %. Tried and not kept (docs/learning.md):
web boards at MiniWoB++'s 160 x 210 and phones at 540 x 960 beside them (live level 1 78.5 %, MiniWoB++
still invalid), and 4,000 level-0 episodes with 1,200 MiniWoB++ oracle episodes over 500 steps (72.5 %;
MiniWoB++ 99.5 % invalid: the oracle's thoughts quote the page's label, which the tiny model garbles)."""


def with_steps(stages: tuple[Stage, ...], steps: list[int]) -> tuple[Stage, ...]:
    """The stages with explicit step counts, one per stage; 0 skips a stage's training (e.g. when
    continuing from `init_checkpoint`). Skipped stages stay in the plan: a stage keeps its index (its
    seed and checkpoint directory) and a skipped grounding stage still gives the later stages its
    replay pool, so continuing from `WORK/ckpt-K` trains what one run would."""
    if len(steps) != len(stages) or any(s < 0 for s in steps) or not any(steps):
        raise ValueError(f"need {len(stages)} step counts >= 0 (one per stage, not all 0), got {steps}")
    return tuple(replace(st, steps=k) for st, k in zip(stages, steps))


def scaled(stages: tuple[Stage, ...], scale: float) -> tuple[Stage, ...]:
    """The stages with step counts (and data sizes) multiplied by `scale` (at least 1 step, 8 records)."""
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    def n(k: int) -> int:
        return max(8, round(k * min(1.0, scale)))

    return tuple(replace(s, n=n(s.n), steps=max(1, round(s.steps * scale)),
                         extra=tuple(replace(e, n=n(e.n)) for e in s.extra)) for s in stages)


def is_refusal(item: Any) -> bool:
    """A grounding training item whose answer is the refusal `[-1,-1]` (its element is not on screen)."""
    from venus_core.data import GroundingSample

    return isinstance(item.record, GroundingSample) and item.record.box is None


def with_replay(corpus: Any, pool: list[Any], share: float, *, seed: int, refusals: float = 0.0,
                refusal: Callable[[Any], bool] = is_refusal) -> tuple[Any, int]:
    """`corpus` with lower-level training items added to its grounding training data so that they
    make up `share` of it (drawn without replacement while the pool lasts, seeded); and how many.
    The held-out split is the stage's own.

    `refusals` > 0: that share of the replayed items are refusals (`refusal(item)`), drawn from the
    pool's refusals and its answerable items separately (each without replacement while it lasts);
    0 draws as the pool holds them. A pool without refusals (or without answerable items) cannot
    give the share: ValueError."""
    from venus_core.train.data import Corpus

    if not 0 <= share < 1:
        raise ValueError(f"replay share must be in [0, 1), got {share}")
    if not 0 <= refusals <= 1:
        raise ValueError(f"replay refusal share must be in [0, 1], got {refusals}")
    if share == 0 or not pool:
        return corpus, 0
    import random

    own = sum(len(v) for v in corpus.train.values())
    n = round(share / (1 - share) * own)
    rng = random.Random(seed)

    def draw(items: list[Any], k: int) -> list[Any]:
        order = list(items)
        rng.shuffle(order)
        return (order * (1 + k // len(order)))[:k] if k else []

    if refusals:
        no, yes = [it for it in pool if not refusal(it)], [it for it in pool if refusal(it)]
        k = round(refusals * n)
        if (k and not yes) or (n - k and not no):
            raise ValueError(f"replay: {refusals:.0%} refusals wanted, the pool of {len(pool)} holds "
                             f"{len(yes)} refusals and {len(no)} answerable items")
        picked = draw(yes, k) + draw(no, n - k)
        rng.shuffle(picked)
    else:
        picked = draw(pool, n)
    train = {d: list(v) for d, v in corpus.train.items()}
    train["grounding"] = train.get("grounding", []) + picked
    return Corpus(train=train, held_out=corpus.held_out, sources=list(corpus.sources)), n


def add_to_pool(pool: dict[int, list[Any]], level: int, items: list[Any]) -> int:
    """Add a grounding stage's training items to its level's replay pool, in order, leaving out records
    the pool holds already (by record id: a later stage of the level that trains on the same screens,
    as stage 3 does on stage 2's, adds only what is new to it, e.g. its extras); how many were added."""
    have = pool.setdefault(level, [])
    seen = {it.record.id for it in have}
    new = [it for it in items if it.record.id not in seen and not seen.add(it.record.id)]  # type: ignore[func-returns-value]
    have.extend(new)
    return len(new)


def reuse_stage_data(work: Path, earlier: list[Path]) -> list[str]:
    """Link the synthesised stage data of earlier bootstrap work directories into `work`; the names.

    A stage's data directory is named by its level, kind, size and seed (`level2-grounding-…`,
    `extra15.0-miniwob-…`), so a linked directory is found by the stage that made it and not made
    again: continuing a plan with `init_checkpoint` then trains on the data one run would have had,
    its replay pool included. Half-written directories (`.tmp`), checkpoints and reports are not
    linked, and a name `work` has already is left as it is (the first earlier directory wins)."""
    work.mkdir(parents=True, exist_ok=True)
    linked: list[str] = []
    for src in earlier:
        if not src.is_dir():
            raise FileNotFoundError(f"reuse data: {src} is not a bootstrap work directory")
        for d in sorted(src.iterdir()):
            if (d.is_dir() and d.name.startswith(("level", "extra")) and ".tmp" not in d.name
                    and not (work / d.name).exists() and not (work / d.name).is_symlink()):
                (work / d.name).symlink_to(d.resolve())
                linked.append(d.name)
    return linked


def _write_json(path: Path, obj: Any) -> None:
    """Write JSON via a temp file and a rename (a reader never sees half a report)."""
    import json
    import os

    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)

def bootstrap(
    out_dir: str | Path,
    spec: AgentSpec,
    *,
    work_dir: str | Path,
    stages: tuple[Stage, ...] = DEFAULT_STAGES,
    eval_limit: int = 100,
    tracker: Tracker | None = None,
    init_checkpoint: str | Path | None = None,
) -> dict[str, Any]:
    """Train the tiny model of `spec.model.tiny` from random init through `stages`; save to `out_dir`.

    `init_checkpoint` (a training checkpoint `.../step-N` of an earlier bootstrap) continues from
    those weights instead of random init. Returns the report (also `out_dir/bootstrap_report.json`).
    """
    from venus_core.data.synth import synthesize
    from venus_core.data.synth.generate import REFUSAL_SHARE
    from venus_core.models.loading import load_model, save_model
    from venus_core.train.data import coarse_targets, load_corpus
    from venus_core.train.distributed import DistEnv
    from venus_core.train.evaluate import rates_to_dict
    from venus_core.train.reading import ReadingTask, train_reading
    from venus_core.train.sft import train_sft

    tracker = tracker or NullTracker()
    out, work = Path(out_dir), Path(work_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"bootstrap output {out} exists and is not empty")
    work.mkdir(parents=True, exist_ok=True)
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    model, processor = load_model("tiny", spec.model, "cpu", tiny_dir=work / "init")
    if init_checkpoint is not None:
        from safetensors.torch import load_model as st_load_model

        st_load_model(model, str(Path(init_checkpoint) / "model.safetensors"))
    env = DistEnv(0, 1, 0, torch.device("cpu"), "single")
    report: dict[str, Any] = {"tiny": spec.model.tiny.model_dump(mode="json"), "stages": [],
                              "init_checkpoint": str(init_checkpoint) if init_checkpoint else None, "skipped": [],
                              "earlier": _earlier_stages(work, stages, init_checkpoint),
                              # what the weights and the timing depend on beyond the plan (float order; malloc)
                              "torch_threads": torch.get_num_threads(),
                              "glibc_tunables": os.environ.get("GLIBC_TUNABLES", "")}
    offset = 0
    lower: dict[int, list[Any]] = {}  # level -> training items of that level's grounding stages (exact targets)
    last = max((k for k, st in enumerate(stages) if st.steps), default=-1)
    for k, st in enumerate(stages):
        if st.steps == 0:  # skipped (continuing from init_checkpoint); a grounding stage still gives its replay pool
            report["skipped"].append({"index": k, "level": st.level, "kind": st.kind, "records": st.n})
            if st.kind != "grounding" or k > last:
                continue
        if st.kind == "reading":
            c0 = time.process_time()
            read = train_reading(model, processor, steps=st.steps, lr=st.lr or spec.mid_train.lr,
                                 seed=st.seed or READING_SEED + 10 * k,
                                 level=st.level, batch=st.n, tracker=_Offset(tracker, offset),
                                 ckpt_dir=work / f"ckpt-{k}-level{st.level}-reading", layout=st.read_layout)
            offset += st.steps
            report["stages"].append({"index": k, "level": st.level, "kind": st.kind, "records": st.n,
                                     "steps": st.steps, **{key: v for key, v in read.items() if key != "steps"},
                                     "stage_cpu_s": round(time.process_time() - c0, 1)})
            _write_json(work / "bootstrap_progress.json", report)
            continue
        seed = st.seed or 1000 + st.level
        ref = f"-refusal{round(100 * st.refusal)}" if st.refusal else ""  # the default keeps the plan's names
        refusal_share = st.refusal or REFUSAL_SHARE
        data = work / (f"level{st.level}-{st.kind}-{st.n}" + (f"-seed{seed}" if st.seed else "")
                       + _data_suffix(st.kind, ref, st.think))
        t0, c0 = time.perf_counter(), time.process_time()
        if not (data / "manifest.json").is_file():
            synthesize(st.kind, st.n, st.level, seed, data, platform="both",  # type: ignore[arg-type]
                       refusal_share=refusal_share, think=st.think)
        # a skipped grounding stage's extras are in its replay pool too, as they are in one uninterrupted run
        extras = [work / _extra_name(k, i, st.kind, ex, ref, st.think) for i, ex in enumerate(st.extra)]
        for i, (ex, path) in enumerate(zip(st.extra, extras)):
            ex_seed = 1100 + 10 * k + i
            if (path / "manifest.json").is_file():
                continue
            if ex.miniwob:
                _collect_miniwob(ex, ex_seed, path)
            else:
                synthesize(ex.kind or st.kind, ex.n, ex.level, ex_seed, path,  # type: ignore[arg-type]
                           platform=ex.platform, size=ex.size, refusal_share=refusal_share, layout=ex.layout,
                           think=st.think)
        synth_s = time.perf_counter() - t0
        corpus = load_corpus([data, *extras], validation_fraction=0.05, history_len=spec.data.history_len,
                             seed=spec.data.seed)
        if st.kind == "grounding":
            add_to_pool(lower, st.level, [it for v in corpus.train.values() for it in v])
        if st.steps == 0:
            continue
        refusals_held_back = 0
        if st.coarse_grid:
            corpus, refusals_held_back = coarse_targets(corpus, st.coarse_grid)
        # a grounding stage replays the levels below it; a navigation / mixture stage also its own level's grounding
        top = st.level if st.kind != "grounding" else st.level - 1
        corpus, replayed = with_replay(corpus, [it for lv, items in sorted(lower.items()) if lv <= top
                                                for it in items], st.replay, seed=spec.mid_train.seed + k,
                                     refusals=st.replay_refusal)
        update: dict[str, Any] = {
            "max_steps": st.steps, "eval_every": st.steps, "save_every": st.steps,
            "warmup_steps": min(spec.mid_train.warmup_steps, max(0, st.steps // 4)),
            "max_seq_len": max(spec.mid_train.max_seq_len, 1536), "seed": spec.mid_train.seed + k,
            "instruction_head": spec.mid_train.instruction_head.model_copy(update={"weight": st.head}),
            "attention_supervision": spec.mid_train.attention_supervision.model_copy(update={"weight": st.attend}),
        }
        if st.lr:
            update["lr"] = st.lr
        cfg = spec.mid_train.model_copy(update=update)
        stage_tracker = _Offset(tracker, offset)
        reading = (ReadingTask(model, processor, weight=st.read, seed=READING_SEED + 10 * k, layout=st.read_layout)
                   if st.read else None)
        result = train_sft(model, processor, corpus, st.mixture or spec.data.mixture, cfg, env,
                           ckpt_dir=work / f"ckpt-{k}-level{st.level}-{st.kind}", tracker=stage_tracker, eval_limit=eval_limit,
                           aux_tasks=[reading] if reading is not None else [])
        held_out = rates_to_dict(result.rates) | (reading.report() if reading is not None else {})
        offset += st.steps
        train_size = sum(len(v) for v in corpus.train.values())
        entry = {"index": k, "level": st.level, "kind": st.kind, "records": st.n, "steps": st.steps, "data": corpus.sizes(),
                 "extra": [{"level": e.level, "records": e.n, "platform": e.platform, "size": e.size,
                            "miniwob": list(e.miniwob), "kind": e.kind or st.kind, "seed": 1100 + 10 * k + i,
                            # (one miss reads as it always has in the shipped plan's report)
                            **({"miss_first": True} if e.misses == 1 else {"misses": e.misses} if e.misses else {})}
                           for i, e in enumerate(st.extra)],
                 "refusal_share": refusal_share,
                 "coarse_grid": st.coarse_grid, "refusals_held_back": refusals_held_back,
                 "replayed": replayed, "head": st.head, "attend": st.attend, "read": st.read, "lr": cfg.lr,
                 **({"read_layout": st.read_layout} if st.read and st.read_layout != "grid" else {}),
                 **({"replay_refusal": st.replay_refusal} if st.replay_refusal else {}),
                 **({"think": st.think} if st.think != "goal" else {}),
                 "passes_over_data": round(st.steps * cfg.batch_size / max(1, train_size), 2),
                 "held_out": held_out, "mixture": result.mixture,
                 "synth_wall_s": round(synth_s, 1), "train_wall_s": round(result.wall_s, 1),
                 "train_cpu_s": round(result.cpu_s, 1), "stage_cpu_s": round(time.process_time() - c0, 1)}
        report["stages"].append(entry)
        _write_json(work / "bootstrap_progress.json", report)
    report["wall_s"] = round(time.perf_counter() - t_wall, 1)
    report["cpu_s"] = round(time.process_time() - t_cpu, 1)
    # the report goes in before SHA256SUMS: a file added after the manifest makes loaders refuse it
    save_model(model, processor, out, **{"bootstrap_report.json": json.dumps(report, indent=2, default=str)})
    return report


def _extra_name(k: int, i: int, kind: str, ex: Extra, refusal: str = "", think: str = "goal") -> str:
    if ex.miniwob:
        from venus_core.envs.miniwob_collect import miss_suffix

        return f"extra{k}.{i}-miniwob-{'+'.join(ex.miniwob)}-{ex.n}" + miss_suffix(ex.misses, "-miss")
    size = f"-{ex.size[0]}x{ex.size[1]}" if ex.size else ""
    kind = ex.kind or kind
    layout = f"-{ex.layout}" if ex.layout != "grid" else ""
    return f"extra{k}.{i}-level{ex.level}-{kind}{layout}-{ex.platform}{size}-{ex.n}" + _data_suffix(kind, refusal, think)


def _data_suffix(kind: str, refusal: str, think: str) -> str:
    """The end of a synthetic data directory's name: grounding records' refusal share, navigation records'
    think style (the defaults add nothing, so the plan's names stay what they were)."""
    if kind == "grounding":
        return refusal
    return f"-{think}" if think != "goal" else ""


def _collect_miniwob(ex: Extra, seed: int, out: Path) -> None:
    """`ex.n` MiniWoB++ oracle episodes of each of `ex.miniwob` (page seeds seed..) into `out`; the
    bootstrap needs each task's episodes, so a task whose oracle succeeded on none is an error."""
    from venus_core.envs.miniwob_collect import collect

    # four browser contexts play side by side (page loads overlap); the episodes written do not depend on it
    report = collect(ex.miniwob, ex.n, out, seed=seed, overwrite=True, misses=ex.misses, workers=4)
    empty = [t for t in ex.miniwob if not report.succeeded.get(t)]
    if empty:
        raise RuntimeError(f"bootstrap: MiniWoB++ oracle succeeded on no episode of {empty} ({report.failures[:3]})")
    print(f"bootstrap: {report.written} MiniWoB++ oracle episodes of {list(ex.miniwob)} -> {out} "
          f"({sum(report.attempted.values())} attempted, {report.seconds:.0f} s)")


def _earlier_stages(work: Path, stages: tuple[Stage, ...], init_checkpoint: str | Path | None) -> list[dict[str, Any]]:
    """When continuing in the same work directory: the entries of the stages this run skips, as
    the earlier run's progress file recorded them (that file is rewritten by this run), so the
    final report still describes every stage. Only stages of the same level, kind, size and step
    count count; a file that is not a progress report is named and ignored."""
    path = work / "bootstrap_progress.json"
    if init_checkpoint is None or not path.is_file():
        return []
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        entries = [dict(e) for e in old["stages"]] + [dict(e) for e in old.get("earlier", [])]
        by_index = {int(e["index"]): e for e in entries}
    except (ValueError, KeyError, TypeError) as exc:
        print(f"bootstrap: {path}: not a progress report ({type(exc).__name__}: {exc}); earlier stages not carried over")
        return []
    kept = []
    for k, st in enumerate(stages):
        e = by_index.get(k)
        if st.steps == 0 and e and (e.get("level"), e.get("kind"), e.get("records")) == (st.level, st.kind, st.n):
            kept.append(e)
    return kept


class _Offset:
    """Tracker that shifts step numbers, so the stages of one bootstrap form one curve."""

    def __init__(self, inner: Tracker, offset: int) -> None:
        self.inner, self.offset = inner, offset

    def log_params(self, params: Any) -> None:
        self.inner.log_params(params)

    def log_metrics(self, metrics: Any, step: int) -> None:
        self.inner.log_metrics(metrics, step + self.offset)

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        self.inner.log_artifact(path, name)


__all__ = ["DEFAULT_STAGES", "GROUNDING_ONLY", "MINIWOB_EASY", "Extra", "Stage", "add_to_pool", "bootstrap", "is_refusal",
           "reuse_stage_data", "scaled", "with_replay", "with_steps"]
