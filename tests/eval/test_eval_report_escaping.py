"""The HTML report and its trajectory viewer show hostile text as text (issue 22 §4).

Instructions, goals, model answers (think, action, conclusion), step errors, labels, category
names and settings can all contain markup: a web page's text, a model's output, a dataset's
fields. Every such field gets a payload naming it (a script element, an image with an event
handler, an attribute break-out, a javascript: link); the rendered page is parsed and must hold no
script element, no event-handler attribute, no image other than inline data URLs and no
javascript: URL, while each payload is still shown, as the text it is.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from eval_fixtures import Scripted, _image

from venus_core.data import DatasetWriter, GroundingSample, Provenance, Trajectory, TrajectoryStep
from venus_core.eval.grounding import evaluate_grounding
from venus_core.eval.navigation import evaluate_nav_offline
from venus_core.eval.online import summarize
from venus_core.eval.report import render_report
from venus_core.eval.results import EvalResult
from venus_core.eval.viewer import online_html


def payload(field: str) -> str:
    # short enough for the viewer's shortest cut (120 characters of a raw answer)
    return f'<script>f("{field}")</script>"><img src=x onerror=f(1)><a href=javascript:f()>{field}</a>'



class Page(HTMLParser):
    """Tags, attributes and text of a page, as a browser's parser splits them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _grounding(tmp_path: Path) -> EvalResult:
    path = tmp_path / "grounding"
    with DatasetWriter(path) as w:
        ref = w.put_image(_image((10, 20, 30)))
        for i, box in enumerate([(100, 100, 300, 300), None]):
            w.write(GroundingSample(
                id=f"g{i}", image=ref, image_size=(200, 100), platform="desktop",
                instruction=payload("instruction"), box=box, refusal=box is None, ui_type="text",
                provenance=Provenance(source="synth", source_id=f"g{i}",
                                      extra={"application": payload("application"),
                                             "group": payload("group")})))
    res = evaluate_grounding(path, Scripted({}, default=payload("grounding-answer"), name=payload("model")))
    res.label = payload("label")
    return res


def _navigation(tmp_path: Path) -> EvalResult:
    path = tmp_path / "nav"
    with DatasetWriter(path) as w:
        img = w.put_image(_image((200, 0, 0), (100, 200)))
        w.write(Trajectory(id="e0", episode_id="e0", platform="mobile", goal=payload("goal"), success=True,
                           provenance=Provenance(source="androidcontrol", source_id="e0"), steps=[
                               TrajectoryStep(image=img, image_size=(100, 200), think="t",
                                              action="Type(content='<b>typed</b>')", conclusion="",
                                              instruction=payload("step-instruction"))]))
    answer = (f"<think>{payload('think')}</think><action>Type(content='{payload('action')}')</action>"
              f"<conclusion>{payload('conclusion')}</conclusion>")
    return evaluate_nav_offline(path, Scripted({"e0:0": answer}), level="low")  # shows step instructions


def _online() -> EvalResult:
    step = {"step": 0, "answer": payload("online-answer"), "think": payload("online-think"),
            "conclusion": payload("online-conclusion"), "action": None, "valid": False,
            "error": payload("online-error")}
    sample = {"id": payload("task-id"), "goal": payload("task-goal"), "app": payload("app"), "difficulty": 3,
              "success_check": "synth:level=3", "success": False, "steps": 1, "invalid_steps": 1,
              "truncated": False, "max_steps": 5, "trajectory": [step], "frames": []}
    return EvalResult(evaluator="online", suite=payload("suite"), model="m", data=payload("data"),
                      summary=summarize([sample]), samples=[sample],
                      settings={"simulated": True, "note": payload("setting")})


def test_every_shown_field_is_escaped(tmp_path: Path) -> None:
    html = render_report([_grounding(tmp_path), _navigation(tmp_path), _online()],
                         title=payload("title"), viewer_limit=8)
    page = Page()
    page.feed(html)
    page.close()
    assert "script" not in {t for t, _ in page.tags}
    for tag, attrs in page.tags:
        for key, value in attrs:
            assert not key.lower().startswith("on"), (tag, key, value)
            assert "javascript:" not in (value or "").lower(), (tag, key, value)
        if tag == "img":
            assert dict(attrs)["src"].startswith("data:image/"), attrs
    shown = "".join(page.text)
    fields = ["title", "label", "instruction", "application", "group", "grounding-answer", "goal",
              "step-instruction", "think", "conclusion", "online-answer", "online-think",
              "online-conclusion", "online-error", "task-id", "task-goal", "app", "suite", "data",
              "setting"]
    missing = [f for f in fields if payload(f) not in shown]
    assert missing == [], f"not shown as text (dropped, truncated or parsed as markup): {missing}"
    assert f"Type(content='{payload('action')}')" in shown  # the predicted action, verbatim


def test_online_frames_only_as_image_data_urls() -> None:
    """A result file's frames go into `src`: a hostile one (quotes, a script URL) is refused, shown as text."""
    good = "data:image/png;base64,iVBORw0KGgo="
    hostile = ['x" onerror="alert(1)', "javascript:alert(1)", 'data:image/png;base64,AA" onload="x']
    result = _online()
    step = result.samples[0]["trajectory"][0]
    result.samples[0]["trajectory"] = [dict(step, step=k) for k in range(4)]
    result.samples[0]["frames"] = [good, *hostile]
    page = Page()
    page.feed(online_html(result, 8))
    page.close()
    srcs = [dict(attrs)["src"] for tag, attrs in page.tags if tag == "img"]
    assert srcs == [good]
    for tag, attrs in page.tags:
        assert not any(k.lower().startswith("on") for k, _ in attrs), (tag, attrs)
    assert "".join(page.text).count("is not an image data URL") == 3
