"""Dataset generators of the synthetic world: grounding, navigation, perception/VQA, mixture.

Why: the embedded default trains on data this module writes (`synthesize`), in the platform's
schema (`venus_core.data.schema`) through `DatasetWriter`, so synthetic and imported data are
interchangeable downstream. Every sample draws from its own generator seeded by
(seed, kind, index), so the same seed gives the same records and the same PNG bytes whatever the
order or count of other samples (the manifest's `created_at` is the only field that differs).

Departures from the paper: the paper's grounding/navigation data come from real apps and an MLLM
data engine; here they come from a state machine with exact labels. Refusal negatives (~10 %)
name an element taken from another screen that is verified absent from this one.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from venus_core.actions.render import render_action
from venus_core.data.schema import (
    GroundingSample, Provenance, QASample, Trajectory, TrajectoryStep,
)
from venus_core.data.store import DatasetWriter, Manifest
from venus_core.data.synth.apps.board import LAYOUTS, board_for
from venus_core.data.synth.describe import GROUNDABLE, THINKS, describe, step_texts, unique_description
from venus_core.data.synth.i18n import ViewContext, tr
from venus_core.data.synth.levels import LEVELS, level_spec
from venus_core.data.synth.phone import HOME, Phone, PhoneState, norm_box
from venus_core.data.synth.planner import moves
from venus_core.data.synth.qa import perception_questions, pick_qa, vqa_questions
from venus_core.data.synth.render import render
from venus_core.data.synth.tasks import get_phone, sample_episode
from venus_core.data.synth.theme import THEMES
from venus_core.data.synth.widgets import Screen

Kind = Literal["grounding", "navigation", "vqa", "mixture"]
KINDS = ("grounding", "navigation", "vqa", "mixture")
GENERATOR = "venus_core.data.synth"
REFUSAL_SHARE = 0.10
# UI-Venus-1.5 mid-training domain shares: perception, GUI-VQA, grounding, navigation.
MIXTURE = (("perception", 0.208), ("vqa", 0.221), ("grounding", 0.248), ("navigation", 0.323))


def mixture_counts(n: int) -> dict[str, int]:
    """Split n by the domain shares (largest remainder, so the counts add up to n)."""
    raw = [(d, n * share) for d, share in MIXTURE]
    counts = {d: int(x) for d, x in raw}
    rest = n - sum(counts.values())
    for d, x in sorted(raw, key=lambda dx: (-(dx[1] - int(dx[1])), dx[0]))[:rest]:
        counts[d] += 1
    return counts


class _Ctx:
    """Per-sample choices: platform, language, output size, theme, view context."""

    def __init__(self, rng: random.Random, level: int, platform: str,
                 size: tuple[int, int] | None) -> None:
        spec = level_spec(level)
        self.platform = rng.choice(["mobile", "web"]) if platform == "both" else platform
        self.lang = "zh" if rng.random() < spec.zh_share else "en"
        default = spec.mobile_size if self.platform == "mobile" else spec.web_size
        self.size = size or default
        self.theme = rng.choice(sorted(THEMES))
        self.view = ViewContext.for_output(self.platform, self.lang, *self.size)  # type: ignore[arg-type]


def sample_screen(rng: random.Random, level: int, ctx: ViewContext, layout: str = "grid"
                  ) -> tuple[Phone, PhoneState, Screen]:
    """A screen of `level`: a board (levels 0–2; levels 1–2 on `layout`) or an app screen after a
    few random moves."""
    if level <= 2:
        phone = get_phone(("board",))
        board = board_for(rng, level, layout)
        state = phone.initial(rng, foreground="board").with_app("board", board)
        return phone, state, phone.view(state, ctx)
    phone = get_phone()
    state = phone.initial(rng, foreground=rng.choice(list(phone.apps)))
    for _ in range(rng.randint(0, 4)):
        options = moves(phone, state, ctx)
        if not options:
            break
        state = rng.choice(options).state
    return phone, state, phone.view(state, ctx)


def _provenance(kind: str, seed: int, idx: int, level: int, layout: str = "grid") -> Provenance:
    extra: dict[str, object] = {"level": level} | ({"layout": layout} if layout != "grid" else {})
    return Provenance(source="synth", source_id=f"{kind}-{seed}-{idx}", generator=GENERATOR,
                      seed=seed, extra=extra)


_VERBS_EN = ("Click {d}", "Tap {d}", "Select {d}", "Press {d}")
_VERBS_ZH = ("点击{d}", "轻触{d}", "选择{d}")


def _instruction(rng: random.Random, d: str, lang: str) -> str:
    return rng.choice(_VERBS_ZH if lang == "zh" else _VERBS_EN).format(d=d)


def grounding_sample(rng: random.Random, level: int, c: _Ctx, writer: DatasetWriter, seed: int,
                     idx: int, refusal_share: float = REFUSAL_SHARE, layout: str = "grid") -> GroundingSample:
    """An instruction naming one element of a screen -> its box; `refusal_share` refusals."""
    for _ in range(20):
        _, _, screen = sample_screen(rng, level, c.view, layout)
        targets = [w for w in screen.widgets if w.role in GROUNDABLE and w.description
                   and unique_description(screen, w, c.lang)]
        if targets:
            break
    else:
        raise RuntimeError(f"grounding sample {idx}: no screen with a nameable element")
    present = {describe(w, c.lang) for w in screen.widgets} | set(screen.texts())
    absent = None
    if rng.random() < refusal_share:
        for _ in range(10):
            _, _, other = sample_screen(rng, level, c.view, layout)
            cands = [w for w in other.widgets if w.role in GROUNDABLE and w.description
                     and describe(w, c.lang) not in present and w.description not in present]
            if cands:
                absent = rng.choice(cands)
                break
    image = writer.put_image(render(screen, c.size, c.theme))
    common = dict(id=f"synth-grounding-{seed}-{idx:06d}", image=image, image_size=c.size,
                  platform=c.platform, provenance=_provenance("grounding", seed, idx, level, layout),
                  meta={"level": level, "lang": c.lang, "app": screen.app, "page": screen.page,
                        "theme": c.theme})
    if absent is not None:
        return GroundingSample(instruction=_instruction(rng, describe(absent, c.lang), c.lang),
                               box=None, refusal=True, ui_type=None, **common)
    w = rng.choice(targets)
    ui_type = "icon" if w.role in ("icon_button",) or (w.role == "button" and not w.label) \
        else "text"
    return GroundingSample(instruction=_instruction(rng, describe(w, c.lang), c.lang),
                           box=norm_box(w.box, c.view), refusal=False, ui_type=ui_type,
                           **common, )


def trajectory(rng: random.Random, level: int, c: _Ctx, writer: DatasetWriter, seed: int,
               idx: int, think: str = "goal") -> Trajectory:
    """A planned episode replayed through `Phone.step`, one screenshot per step, then Finished.

    An information task closes with Finished(content=answer) or CallUser(content=answer) after its
    answer is checked against the final state and the final screen.
    """
    ep = sample_episode(rng, level, c.view)
    phone, ctx, goal = ep.phone, ep.ctx, ep.task.goal
    state = ep.start
    steps: list[TrajectoryStep] = []
    for m in ep.moves:
        screen = phone.view(state, ctx)
        result = phone.step(state, m.action, ctx)
        if result.state != m.state:
            raise RuntimeError(f"trajectory {idx}: replay of {render_action(m.action)} diverged "
                               f"({result.info})")
        text, conclusion = step_texts(goal, c.lang, m.action, m.widget, screen, think)
        steps.append(TrajectoryStep(
            image=writer.put_image(render(screen, c.size, c.theme)), image_size=c.size,
            think=text, action=render_action(m.action), conclusion=conclusion,
            target_box=norm_box(m.widget.box, ctx) if m.widget is not None else None,
            meta={"app": screen.app, "page": screen.page}))
        state = result.state
    if not ep.task.done(state):
        raise RuntimeError(f"trajectory {idx}: plan for {goal!r} does not reach the goal")
    screen = phone.view(state, ctx)
    if ep.task.answer:
        held = ep.task.answer_in(state)
        if held != ep.task.answer or not any(ep.task.answer in t for t in screen.texts()):
            raise RuntimeError(f"trajectory {idx}: answer {ep.task.answer!r} to {goal!r} is not "
                               f"what the final state holds ({held!r}) or not on its screen")
    final = ep.task.final_action()
    text, conclusion = step_texts(goal, c.lang, final, None, screen, think)
    steps.append(TrajectoryStep(
        image=writer.put_image(render(screen, c.size, c.theme)), image_size=c.size, think=text,
        action=render_action(final), conclusion=conclusion,
        meta={"app": screen.app, "page": screen.page}))
    return Trajectory(id=f"synth-navigation-{seed}-{idx:06d}", episode_id=f"synth-{seed}-{idx}",
                      platform=c.platform, goal=goal, steps=steps, success=True,
                      provenance=_provenance("navigation", seed, idx, level),
                      meta={"level": level, "lang": c.lang, "apps": list(ep.task.apps),
                            "theme": c.theme, "answer": ep.task.answer})


def qa_sample(rng: random.Random, level: int, c: _Ctx, writer: DatasetWriter, seed: int,
              idx: int, domain: Literal["perception", "vqa"], layout: str = "grid") -> QASample:
    """A perception (element-level) or VQA (screen-level) question with its answer."""
    for _ in range(20):
        phone, state, screen = sample_screen(rng, level, c.view, layout)
        title = tr(phone.apps[state.foreground].title_key, c.lang)
        if domain == "perception":
            qa = pick_qa(rng, perception_questions(screen, c.lang,
                                                   lambda b: norm_box(b, c.view)))
        else:
            qa = pick_qa(rng, vqa_questions(screen, c.lang, title))
        if qa is not None:
            break
    else:
        raise RuntimeError(f"{domain} sample {idx}: no screen with a question")
    question, answer = qa
    return QASample(id=f"synth-{domain}-{seed}-{idx:06d}", domain=domain,
                    image=writer.put_image(render(screen, c.size, c.theme)), image_size=c.size,
                    platform=c.platform, question=question, answer=answer,
                    provenance=_provenance(domain, seed, idx, level, layout),
                    meta={"level": level, "lang": c.lang, "app": screen.app, "theme": c.theme})


def _write(writer: DatasetWriter, domain: str, n: int, level: int, seed: int, platform: str,
           size: tuple[int, int] | None, refusal_share: float, advance: Callable[[], None],
           layout: str = "grid", think: str = "goal") -> None:
    """Write the `n` records of `domain`, calling `advance()` after each."""
    for i in range(n):
        rng = random.Random(f"{seed}:{domain}:{level}:{i}")
        c = _Ctx(rng, level, platform, size)
        if domain == "grounding":
            writer.write(grounding_sample(rng, level, c, writer, seed, i, refusal_share, layout))
        elif domain == "navigation":
            writer.write(trajectory(rng, level, c, writer, seed, i, think))
        else:
            writer.write(qa_sample(rng, level, c, writer, seed, i, domain, layout))  # type: ignore[arg-type]
        advance()


SYNTH_EPOCH = "1970-01-01T00:00:00+00:00"
"""Manifest time stamp of synthetic datasets: a function of the seed alone, so the same seed gives a
byte-identical dataset, manifest included."""


def synthesize(kind: Kind, n: int, level: int, seed: int, out_dir: str | Path, *,
               platform: Literal["mobile", "web", "both"] = "both",
               size: tuple[int, int] | None = None, overwrite: bool = False,
               refusal_share: float = REFUSAL_SHARE, layout: str = "grid", think: str = "goal",
               progress: Callable[[int, int | None], None] | None = None) -> Manifest:
    """Write `n` synthetic records of `kind` at curriculum `level` to the dataset `out_dir`.

    `vqa` splits n between perception and VQA questions in the mixture's proportion; `mixture`
    uses the UI-Venus-1.5 domain shares (20.8 / 22.1 / 24.8 / 32.3 %). Navigation records are
    whole `Trajectory` records (use `Trajectory.to_steps` for per-step samples). `size` overrides
    the level's default image size (width, height). `refusal_share` is the chance that a grounding
    sample names an element absent from its screen (answer `[-1,-1]`); the default keeps the
    records of earlier versions byte-identical. `layout` places the buttons of level-1/2 boards:
    "grid" (the 3x3 grid, the default) or "free" (random size and place, `apps.board.scatter_board`;
    grounding, perception and VQA records only). `think` is the navigation steps' think style
    (`describe.THINKS`: "goal" restates the task, the default; "brief" names only the step; the records
    are otherwise the same). `progress(written, n)` is called after each record.
    """
    if kind not in KINDS:
        raise ValueError(f"synthesize: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    if level not in LEVELS:
        raise ValueError(f"synthesize: unknown level {level!r}; known: {sorted(LEVELS)}")
    if platform not in ("mobile", "web", "both"):
        raise ValueError(f"synthesize: platform {platform!r} is not mobile, web or both")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"synthesize: n must be an integer >= 0, got {n!r}")
    if not 0.0 <= refusal_share <= 1.0:
        raise ValueError(f"synthesize: refusal_share must be in [0, 1], got {refusal_share!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"synthesize: layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    if think not in THINKS:
        raise ValueError(f"synthesize: think {think!r} is not one of {', '.join(THINKS)}")
    if layout != "grid" and (level not in (1, 2) or kind in ("navigation", "mixture")):
        raise ValueError(f"synthesize: layout {layout!r} is for level-1/2 grounding, perception and VQA records "
                         f"(got kind {kind!r}, level {level})")
    if kind == "mixture":
        counts = mixture_counts(n)
    elif kind == "vqa":
        share = MIXTURE[0][1] / (MIXTURE[0][1] + MIXTURE[1][1])
        counts = {"perception": round(n * share), "vqa": n - round(n * share)}
    else:
        counts = {kind: n}
    with DatasetWriter(out_dir, sources=["synth"], overwrite=overwrite,
                       created_by=f"{GENERATOR}.synthesize({kind}, level={level}, seed={seed}"
                                  + (f", layout={layout}" if layout != "grid" else "")
                                  + (f", think={think})" if think != "goal" else ")"),
                       created_at=SYNTH_EPOCH) as writer:
        written = 0

        def advance() -> None:
            nonlocal written
            written += 1
            if progress is not None:
                progress(written, n)

        for domain, k in counts.items():
            _write(writer, domain, k, level, seed, platform, size, refusal_share, advance, layout, think)
        manifest = writer.close()
    return manifest


__all__ = ["HOME", "KINDS", "MIXTURE", "mixture_counts", "sample_screen", "synthesize"]
