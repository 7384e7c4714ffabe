"""The report's sample / trajectory viewer: annotated screenshots with the answer and the verdict.

Which samples: for grounding, the wrong answers first (they are what one looks at), then right
ones, up to `limit`, in dataset order within each group; for navigation, whole episodes in dataset
order (a step only makes sense after the steps before it) until `limit` steps are shown. Images
come from the result's dataset (`DatasetReader(result.data)`); when the dataset is no longer
there the viewer says so and shows the text alone, rather than failing the whole report. Online
results carry their own screens (the first episodes', annotated when they were recorded), and each
episode says why it succeeded or failed (`verdict_reason`).

Stepping through an episode: one step at a time, with previous / next and "all steps", in HTML and
CSS alone (`stepper`): a radio button before each step card, the checked one shown. No script,
because the report is opened offline, as an e-mail attachment or in MLflow's artifact view, which
may not run one; where CSS is stripped, every step shows, in order. Element ids are the caller's
`key` plus indices, never text from the result.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html import escape
from typing import Any

from PIL import Image

from venus_core.eval.draw import annotate, data_url
from venus_core.eval.results import EvalResult

OpenImage = Callable[[str], Image.Image]


def dataset_images(result: EvalResult) -> tuple[OpenImage | None, str]:
    """(open_image, note): the result's dataset image opener, or None and why it is unavailable."""
    from venus_core.data.store import DatasetReader

    try:
        return DatasetReader(result.data).open_image, ""
    except (OSError, ValueError) as exc:
        return None, f"screenshots unavailable: dataset {result.data} cannot be opened ({exc})"


def pick_grounding(samples: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    wrong = [s for s in samples if not s["correct"]]
    right = [s for s in samples if s["correct"]]
    return (wrong + right)[:limit]


def pick_episodes(samples: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    episodes: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        episodes.setdefault(s["episode_id"], []).append(s)
    for steps in episodes.values():
        if out and len(out) + len(steps) > limit:
            break
        out += sorted(steps, key=lambda s: s["step_index"])
    return out


def _image(open_image: OpenImage | None, ref: str, **marks: Any) -> str:
    if open_image is None:
        return '<div class="noimg">no screenshot</div>'
    try:
        img = open_image(ref)
    except (OSError, ValueError) as exc:
        return f'<div class="noimg">{escape(str(exc))}</div>'
    return f'<img alt="screenshot" src="{data_url(annotate(img, **marks))}"/>'


def _verdict(ok: bool, text: str) -> str:
    return f'<span class="{"ok" if ok else "bad"}">{escape(text)}</span>'


def grounding_card(s: dict[str, Any], open_image: OpenImage | None) -> str:
    img = _image(open_image, s["image"], box=s["box"], pred_point=s["point"], correct=s["correct"])
    target = "refusal [-1,-1]" if s["refusal"] else f"box {s['box']}"
    cats = " · ".join(str(s[k]) for k in ("platform", "ui_type", "application", "group") if s.get(k))
    verdict = _verdict(s["correct"], "correct" if s["correct"] else ("wrong format" if not s["parsed"] else "wrong"))
    return (f'<figure class="card">{img}<figcaption><b>{escape(s["id"])}</b> {verdict}<br/>'
            f'<i>{escape(s["instruction"])}</i><br/>target: {escape(target)}<br/>'
            f'answer: <code>{escape(s["answer"][:200])}</code><br/><small>{escape(cats)}</small></figcaption></figure>')


def nav_card(s: dict[str, Any], open_image: OpenImage | None) -> str:
    from venus_core.actions import ActionParseError, parse_action

    def parsed(text: str | None) -> Any:
        if text is None:
            return None
        try:
            return parse_action(text, s["platform"])
        except ActionParseError:
            return None

    img = _image(open_image, s["image"], box=s["target_box"], ref_action=parsed(s["reference"]),
                 pred_action=parsed(s["predicted"]), correct=s["step_success"])
    verdict = _verdict(s["step_success"], "step success" if s["step_success"] else
                       ("type match, arguments wrong" if s["type_match"] else
                        ("wrong format" if not s["parsed"] else "wrong type")))
    instr = f'<br/>step instruction: <i>{escape(s["instruction"])}</i>' if s.get("instruction") else ""
    return (f'<figure class="card">{img}<figcaption>{verdict}{instr}<br/>'
            f'reference: <code>{escape(s["reference"])}</code><br/>'
            f'predicted: <code>{escape(s["predicted"] or "—")}</code><br/>'
            f'think: {escape(s["think"][:300]) or "—"}<br/>conclusion: {escape(s["conclusion"][:200]) or "—"}'
            f'</figcaption></figure>')


_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def _check_key(key: str) -> str:
    if _KEY.fullmatch(key) is None:
        raise ValueError(f"viewer key {key!r}: expected a letter, then letters, digits, '-' or '_'")
    return key


def viewer_html(result: EvalResult, limit: int, open_image: OpenImage | None = None, *, key: str = "v") -> str:
    """The viewer block of one result (see the module docstring for which samples); `key` prefixes
    its element ids and must differ between the results of one page."""
    _check_key(key)
    note = ""
    if open_image is None:
        open_image, note = dataset_images(result)
    head = f'<p class="note">{escape(note)}</p>' if note else ""
    if result.evaluator == "grounding":
        cards = [grounding_card(s, open_image) for s in pick_grounding(result.samples, limit)]
        return head + '<div class="cards">' + "\n".join(cards) + "</div>"
    if result.evaluator == "nav_offline":
        episodes: dict[str, list[dict[str, Any]]] = {}
        for s in pick_episodes(result.samples, limit):
            episodes.setdefault(s["episode_id"], []).append(s)
        blocks = [stepper(f"{key}-e{n}", f'<h4>episode {escape(eid)}: {escape(steps[0]["goal"])}</h4>',
                          [nav_card(s, open_image) for s in steps])
                  for n, (eid, steps) in enumerate(episodes.items())]
        return head + "\n".join(blocks)
    if result.evaluator == "online":
        return online_html(result, limit, key=key)
    raise ValueError(f"no viewer for evaluator {result.evaluator!r}")


def stepper(key: str, header: str, cards: list[str], total: int | None = None) -> str:
    """An episode block whose step `cards` are shown one at a time (module docstring).

    Layout, which the report's CSS relies on: inside `.steps`, an "all steps" radio, then for each
    step its radio followed by a `.step` holding the previous / next labels and the card; a checked
    step radio shows the `.step` right after it, the checked "all" radio shows every `.step`.
    `total`: the episode's length when only its first `len(cards)` steps are shown.
    """
    if not cards:
        return f'<div class="episode">{header}</div>'
    n = len(cards)
    cut = total is not None and total > n
    of = f"{n} shown ({total} in the episode)" if cut else str(n)
    body = [f'<input type="radio" class="all" name="{key}-step" id="{key}-all" aria-label="all steps"/>']
    for k, card in enumerate(cards):
        prev = (f'<label class="prev" for="{key}-s{k - 1}">&#9664; previous</label>' if k > 0
                else '<span class="prev off">&#9664; previous</span>')
        nxt = (f'<label class="next" for="{key}-s{k + 1}">next &#9654;</label>' if k + 1 < n
               else '<span class="next off">next &#9654;</span>')
        checked = ' checked="checked"' if k == 0 else ""
        body.append(f'<input type="radio" name="{key}-step" id="{key}-s{k}" aria-label="step {k + 1} of {n}"{checked}/>'
                    f'<div class="step"><div class="stepnav">{prev} <span class="pos">step {k + 1} of {of}</span> '
                    f'{nxt}</div>{card}</div>')
    bar = (f'<div class="stepbar"><label for="{key}-s0">one step at a time</label> · '
           f'<label for="{key}-all">all {n} step{"" if n == 1 else "s"}{" shown" if cut else ""}</label></div>')
    return f'<div class="episode stepper">{header}{bar}<div class="cards steps">{"".join(body)}</div></div>'


_FRAME_URL = re.compile(r"data:image/(png|jpeg|webp);base64,[A-Za-z0-9+/]*={0,2}")


def _frame_img(frame: object, where: str) -> str:
    """An episode's kept screen: only an image data URL is put in `src` (a result file is data, and a
    hostile one could otherwise add attributes or a script URL); anything else is shown as not kept."""
    if not frame:
        return '<div class="noimg">screen not kept</div>'
    if not isinstance(frame, str) or _FRAME_URL.fullmatch(frame) is None:
        return f'<div class="noimg">screen not shown: {escape(where)} is not an image data URL</div>'
    return f'<img alt="screen" src="{frame}"/>'


def verdict_reason(ep: dict[str, Any]) -> str:
    """Why an online episode succeeded or failed, from what its result records: how it ended (the
    model's last action, or the step limit), that success is the environment's check on its state
    (named by `success_check`), and its invalid steps with the last error."""
    steps = ep["trajectory"]
    count = f"{ep['steps']} step{'' if ep['steps'] == 1 else 's'}"
    limit = ep.get("max_steps")
    check = ep.get("success_check") or "its state"
    last = steps[-1] if steps else None
    if ep.get("truncated"):
        ended = f"cut by the step limit after {count}" + (f" (limit {limit})" if limit else "")
    elif last is not None and last["valid"] and last.get("action"):
        ended = f"the model ended it with {last['action']} after {count}"
    else:
        ended = f"it ended after {count}"
    verdict = "passed" if ep["success"] else "did not pass"
    out = f"{ended}; the environment's check of {check} {verdict}"
    invalid = ep.get("invalid_steps", sum(1 for s in steps if not s["valid"]))
    if invalid:
        errors = [s["error"] for s in steps if s.get("error")]
        out += f"; {invalid} of {ep['steps']} steps invalid (not executed)"
        if errors:
            out += f", last error: {errors[-1][:200]}"
    return out + "."


def online_html(result: EvalResult, limit: int, *, key: str = "v") -> str:
    """Episodes of an online run, in task order, up to `limit` steps, each stepped through one step
    at a time (`stepper`) with the screen where it was kept and why the episode succeeded or failed."""
    _check_key(key)
    blocks: list[str] = []
    shown = 0
    for n, ep in enumerate(result.samples):
        if shown >= limit:
            break
        verdict = _verdict(ep["success"], "success" if ep["success"] else "failed")
        cards = []
        for k, step in enumerate(ep["trajectory"][: max(0, limit - shown)]):
            frame = ep["frames"][k] if k < len(ep["frames"]) else None
            img = _frame_img(frame, f"{ep['id']} step {step['step']}")
            ok = _verdict(step["valid"], "executed" if step["valid"] else "invalid")
            err = f'<br/>error: {escape(step["error"])}' if step.get("error") else ""
            cards.append(f'<figure class="card">{img}<figcaption>{ok}<br/>'
                         f'action: <code>{escape(step["action"] or step["answer"][:120])}</code>{err}<br/>'
                         f'think: {escape(step["think"][:300]) or "—"}<br/>conclusion: '
                         f'{escape(step["conclusion"][:200]) or "—"}</figcaption></figure>')
            shown += 1
        header = (f'<h4>{escape(ep["id"])} (level {escape(str(ep["difficulty"]))}): {escape(ep["goal"])} {verdict}, '
                  f'{escape(str(ep["steps"]))} steps</h4><p class="why">why: {escape(verdict_reason(ep))}</p>')
        blocks.append(stepper(f"{key}-e{n}", header, cards, total=len(ep["trajectory"])))
    return "\n".join(blocks)
