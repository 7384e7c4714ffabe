"""The report's sample / trajectory viewer: annotated screenshots with the answer and the verdict.

Which samples: for grounding, the wrong answers first (they are what one looks at), then right
ones, up to `limit`, in dataset order within each group; for navigation, whole episodes in dataset
order (a step only makes sense after the steps before it) until `limit` steps are shown. Images
come from the result's dataset (`DatasetReader(result.data)`); when the dataset is no longer
there the viewer says so and shows the text alone, rather than failing the whole report. Online
results carry their own screens (the first episodes', annotated when they were recorded).
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
    return (f'<figure class="card">{img}<figcaption><b>step {s["step_index"]}</b> {verdict}{instr}<br/>'
            f'reference: <code>{escape(s["reference"])}</code><br/>'
            f'predicted: <code>{escape(s["predicted"] or "—")}</code><br/>'
            f'think: {escape(s["think"][:300]) or "—"}<br/>conclusion: {escape(s["conclusion"][:200]) or "—"}'
            f'</figcaption></figure>')


def viewer_html(result: EvalResult, limit: int, open_image: OpenImage | None = None) -> str:
    """The viewer block of one result (see the module docstring for which samples)."""
    note = ""
    if open_image is None:
        open_image, note = dataset_images(result)
    head = f'<p class="note">{escape(note)}</p>' if note else ""
    if result.evaluator == "grounding":
        cards = [grounding_card(s, open_image) for s in pick_grounding(result.samples, limit)]
        return head + '<div class="cards">' + "\n".join(cards) + "</div>"
    if result.evaluator == "nav_offline":
        blocks: list[str] = []
        current = None
        for s in pick_episodes(result.samples, limit):
            if s["episode_id"] != current:
                if current is not None:
                    blocks.append("</div></div>")
                current = s["episode_id"]
                blocks.append(f'<div class="episode"><h4>episode {escape(current)}: {escape(s["goal"])}</h4>'
                              '<div class="cards">')
            blocks.append(nav_card(s, open_image))
        if current is not None:
            blocks.append("</div></div>")
        return head + "\n".join(blocks)
    if result.evaluator == "online":
        return online_html(result, limit)
    raise ValueError(f"no viewer for evaluator {result.evaluator!r}")


_FRAME_URL = re.compile(r"data:image/(png|jpeg|webp);base64,[A-Za-z0-9+/]*={0,2}")


def _frame_img(frame: object, where: str) -> str:
    """An episode's kept screen: only an image data URL is put in `src` (a result file is data, and a
    hostile one could otherwise add attributes or a script URL); anything else is shown as not kept."""
    if not frame:
        return '<div class="noimg">screen not kept</div>'
    if not isinstance(frame, str) or _FRAME_URL.fullmatch(frame) is None:
        return f'<div class="noimg">screen not shown: {escape(where)} is not an image data URL</div>'
    return f'<img alt="screen" src="{frame}"/>'


def online_html(result: EvalResult, limit: int) -> str:
    """Episodes of an online run, in task order, up to `limit` steps; screens where they were kept."""
    blocks: list[str] = []
    shown = 0
    for ep in result.samples:
        if shown >= limit:
            break
        verdict = _verdict(ep["success"], "success" if ep["success"] else "failed")
        cards = []
        for k, step in enumerate(ep["trajectory"][: max(0, limit - shown)]):
            frame = ep["frames"][k] if k < len(ep["frames"]) else None
            img = _frame_img(frame, f"{ep['id']} step {step['step']}")
            ok = _verdict(step["valid"], "executed" if step["valid"] else "invalid")
            err = f'<br/>error: {escape(step["error"])}' if step.get("error") else ""
            cards.append(f'<figure class="card">{img}<figcaption><b>step {step["step"]}</b> {ok}<br/>'
                         f'action: <code>{escape(step["action"] or step["answer"][:120])}</code>{err}<br/>'
                         f'think: {escape(step["think"][:300]) or "—"}<br/>conclusion: '
                         f'{escape(step["conclusion"][:200]) or "—"}</figcaption></figure>')
            shown += 1
        blocks.append(f'<div class="episode"><h4>{escape(ep["id"])} (level {ep["difficulty"]}): '
                      f'{escape(ep["goal"])} {verdict}, {ep["steps"]} steps</h4>'
                      f'<div class="cards">{"".join(cards)}</div></div>')
    return "\n".join(blocks)
