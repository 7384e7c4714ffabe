"""DOM-aware oracle solvers for MiniWoB++ tasks: ground-truth web trajectories for offline RL.

Why: UI-Venus-1.5 trains its web agent on trajectories whose actions are exact. A MiniWoB page
knows where everything is: an oracle reads the instruction (#query) and the live DOM (element
boxes, labels, values), decides the next step like a careful human would, and emits a unified
action whose coordinates are the centre of the element's box in the 0–1000 frame of the
screenshot, plus the box itself (`target_box`) and the think / conclusion texts of the UI-Venus
navigation format. The oracle never calls the page's JS handlers: every effect comes from the
action, executed by the env through real input events, and success is the page's own reward.

A solver is a generator: it yields one `OracleStep` at a time and the caller executes it before
asking for the next, so a solver sees the page after its previous action (an autocomplete menu
that opened, a dialog that moved). Solvers raise `OracleError` when the page does not look as
expected; the collector counts such episodes as failures. What a solver needs the page to show
after an action (the autocomplete list) is waited for on the DOM with a bounded timeout
(`Page.wait_settled`, `OracleTimeout`), never by a fixed number of sleeps.

Tasks: click-test (one button), click-test-2 (one of two, by name), click-color (one of four
colour boxes, by colour name), click-button, click-link, click-checkboxes, click-option, click-tab, click-dialog,
focus-text, enter-text, enter-password, login-user, use-autocomplete (`SOLVERS`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from venus_core.actions import Action, Click, Type, Wait, box_from_pixels
from venus_core.envs.base import EnvError
from venus_core.envs.miniwob import MiniWobEnv

WAIT_TIMEOUT_MS = 10_000  # the longest a solver waits for the page to show what it needs
SUGGESTIONS = "ul.ui-autocomplete li"

_BOXES_JS = """(selector) => Array.from(document.querySelectorAll(selector)).map((el) => {
  const rects = el.getClientRects();
  const r = rects.length ? rects[0] : el.getBoundingClientRect();
  const style = window.getComputedStyle(el);
  return {x: r.left, y: r.top, w: r.width, h: r.height,
          text: (el.textContent || '').replace(/\\s+/g, ' ').trim(),
          value: el.value === undefined ? null : el.value,
          checked: el.checked === undefined ? null : el.checked,
          id: el.id || null, tag: el.tagName.toLowerCase(),
          visible: r.width > 0 && r.height > 0 && style.visibility !== 'hidden'
                   && style.display !== 'none'};
})"""
# some visible element of `selector` (as `_BOXES_JS` sees it) has a text with `prefix` / `suffix`
_SHOWN_JS = ("([selector, prefix, suffix]) => (" + _BOXES_JS + ")(selector).some((e) => e.visible"
             " && e.text.startsWith(prefix) && e.text.endsWith(suffix))")
# the jQuery UI autocomplete of `field` has settled on what the field holds: its last search was
# for the field's value (no key still waiting out the search delay), no search is in flight, and
# its list shows an entry with `prefix` / `suffix` (as `_SHOWN_JS` sees it)
_SETTLED_JS = ("([field, selector, prefix, suffix]) => { const w = $(field).autocomplete('instance');"
               " return !!w && w.term === $(field).val() && !w.pending && (" + _SHOWN_JS
               + ")([selector, prefix, suffix]); }")


class OracleError(EnvError):
    """The page does not look as the solver expects (the episode is counted as failed)."""


class OracleTimeout(OracleError):
    """What the solver waited for did not appear on the page within the timeout."""


@dataclass(frozen=True)
class Element:
    """An element's first client rectangle (CSS pixels of the viewport) and its state."""

    x: float
    y: float
    w: float
    h: float
    text: str
    value: str | None
    checked: bool | None
    id: str | None
    tag: str


@dataclass(frozen=True)
class OracleStep:
    """One step of an oracle trajectory: the action, its target box (0–1000) and the texts."""

    action: Action
    think: str
    conclusion: str
    target_box: tuple[int, int, int, int] | None = None
    dom_box: tuple[float, float, float, float] | None = None  # CSS pixels (x1, y1, x2, y2)


class Page:
    """Read-only DOM access for the solvers (through the env's page)."""

    def __init__(self, env: MiniWobEnv, *, timeout_ms: int = WAIT_TIMEOUT_MS) -> None:
        self.env = env
        self.timeout_ms = timeout_ms

    def query(self) -> str:
        return self.env.utterance()

    def elements(self, selector: str) -> list[Element]:
        found = self.env.evaluate(_BOXES_JS, selector)
        return [Element(**{k: v for k, v in e.items() if k != "visible"}) for e in found
                if e["visible"]]

    def matching(self, selector: str, prefix: str = "", suffix: str = "") -> list[Element]:
        """Visible `selector` elements whose text starts with `prefix`, ends with `suffix`."""
        return [e for e in self.elements(selector)
                if e.text.startswith(prefix) and e.text.endswith(suffix)]

    def wait_settled(self, field: str, selector: str, what: str, prefix: str = "",
                     suffix: str = "") -> None:
        """Wait until the jQuery UI autocomplete of `field` has searched for the field's whole
        value and its list (`selector`) shows an entry with `prefix` / `suffix`; OracleTimeout
        naming `what` after `timeout_ms`.

        A wait on the page's state, not a sleep: the page reacts to an action after a delay of
        its own (jQuery UI opens the list 300 ms after the last key, later on a loaded machine),
        so a fixed sleep either races it or wastes time. And not merely "the entry is shown": on
        a loaded machine the keys of one Type can reach the page more than that delay apart, so
        the list of an earlier prefix ("C") opens, already offering the entry, and is re-rendered
        (entries moved) when the search for the whole prefix ("Ce") runs; positions read from
        the earlier list race that re-render."""
        if not self.env.wait_for(_SETTLED_JS, [field, selector, prefix, suffix],
                                 timeout_ms=self.timeout_ms):
            raise OracleTimeout(f"timed out after {self.timeout_ms} ms waiting for {what} "
                                f"({selector!r} for the whole value of {field!r})")

    def one(self, selector: str, text: str | None = None) -> Element:
        found = [e for e in self.elements(selector) if text is None or e.text == text]
        if not found:
            what = f"{selector!r}" + (f" with text {text!r}" if text is not None else "")
            raise OracleError(f"no visible element {what} on the page")
        return found[0]

    def click(self, el: Element, think: str, conclusion: str) -> OracleStep:
        """A Click at the centre of `el`, which must lie inside the viewport."""
        w, h = self.env.screen
        cx, cy = el.x + el.w / 2, el.y + el.h / 2
        if not (0 <= cx < w and 0 <= cy < h):
            raise OracleError(f"element {el.tag} {el.text[:30]!r} is outside the viewport")
        x1, y1 = max(0.0, el.x), max(0.0, el.y)
        x2, y2 = min(float(w), el.x + el.w), min(float(h), el.y + el.h)
        box = box_from_pixels(x1, y1, x2, y2, w, h)
        return OracleStep(Click(box=frame_point(cx, cy, w, h)), think, conclusion, box, (x1, y1, x2, y2))


def frame_point(x: float, y: float, w: int, h: int) -> tuple[int, int]:
    """A viewport pixel in the 0–1000 frame of the actions (clamped to 1000 at the far edges)."""
    return min(1000, round(x * 1000 / w)), min(1000, round(y * 1000 / h))


Solver = Callable[[Page], Iterator[OracleStep]]


def _quoted(query: str, pattern: str) -> tuple[str, ...]:
    m = re.search(pattern, query)
    if m is None:
        raise OracleError(f"instruction {query!r} does not match {pattern!r}")
    return m.groups()


def _type_into(page: Page, selector: str, text: str, what: str) -> Iterator[OracleStep]:
    field = page.one(selector)
    yield page.click(field, f"To enter \"{text}\" I first focus the {what} by clicking it.",
                     f"Focused the {what}.")
    yield OracleStep(Type(content=text), f"The {what} is focused, so I type \"{text}\".",
                     f"Typed \"{text}\" into the {what}.")


def _submit(page: Page, label: str = "Submit") -> OracleStep:
    button = page.one("#subbtn")
    return page.click(button, f"Everything is filled in; I click the \"{button.text or label}\" "
                      "button to finish.", f"Clicked \"{button.text or label}\".")


def click_button(page: Page) -> Iterator[OracleStep]:
    (label,) = _quoted(page.query(), r'Click on the "(.*)" button')
    yield page.click(page.one("#area button", label),
                     f"The instruction asks for the \"{label}\" button; I found it on the page "
                     "and click it.", f"Clicked the \"{label}\" button.")


def click_test(page: Page) -> Iterator[OracleStep]:
    yield page.click(page.one("#area button"), "There is one button on the page; I click it.",
                     "Clicked the button.")


def _uncovered(el: Element, over: Element) -> Element:
    """The largest strip of `el` that `over` (drawn on top of it) leaves visible; `el` itself when
    they do not overlap. OracleError when `over` covers it whole."""
    if over.x >= el.x + el.w or over.x + over.w <= el.x or over.y >= el.y + el.h or over.y + over.h <= el.y:
        return el
    strips = [replace(el, w=over.x - el.x), replace(el, x=over.x + over.w, w=el.x + el.w - over.x - over.w),
              replace(el, h=over.y - el.y), replace(el, y=over.y + over.h, h=el.y + el.h - over.y - over.h)]
    best = max(strips, key=lambda e: min(e.w, e.h))
    if min(best.w, best.h) < 4:
        raise OracleError(f"element {el.text!r} is covered by {over.text!r}")
    return best


def click_test_2(page: Page) -> Iterator[OracleStep]:
    (label,) = _quoted(page.query(), r"^Click button (\w+)\.$")
    buttons = page.elements("#area button")
    target = page.one("#area button", label)
    later = buttons[[b.text for b in buttons].index(label) + 1:]  # drawn on top of it (absolute positions)
    for other in later:
        target = _uncovered(target, other)
    yield page.click(target, f"The instruction names button {label}; I click it.", f"Clicked button {label}.")


def click_color(page: Page) -> Iterator[OracleStep]:
    (color,) = _quoted(page.query(), r"^Click on the ([a-z]+) colored box\.$")
    yield page.click(page.one(f'#area .color[data-color="{color}"]'), f"The instruction asks for "
                     f"the {color} box; I click it.", f"Clicked the {color} box.")


def click_link(page: Page) -> Iterator[OracleStep]:
    (label,) = _quoted(page.query(), r'Click on the link "(.*)"')
    yield page.click(page.one("#area .alink", label),
                     f"I need the link \"{label}\"; it is in the text below, so I click it.",
                     f"Clicked the link \"{label}\".")


def _labels(page: Page) -> list[tuple[Element, Element]]:
    labels = page.elements("#boxes label")
    inputs = page.elements("#boxes label input")
    if len(labels) != len(inputs):
        raise OracleError(f"{len(labels)} labels but {len(inputs)} inputs in #boxes")
    return list(zip(labels, inputs, strict=True))


def click_checkboxes(page: Page) -> Iterator[OracleStep]:
    (names,) = _quoted(page.query(), r"^Select (.*) and click Submit\.$")
    wanted = set() if names == "nothing" else {n.strip() for n in names.split(",")}
    pairs = _labels(page)
    missing = wanted - {label.text for label, _ in pairs}
    if missing:
        raise OracleError(f"checkboxes {sorted(missing)} are not on the page")
    for label, box in pairs:
        if (label.text in wanted) != bool(box.checked):
            verb = "check" if label.text in wanted else "uncheck"
            yield page.click(box, f"\"{label.text}\" must be {verb}ed for the selection "
                             f"({names}); I click its checkbox.", f"Clicked the \"{label.text}\" "
                             "checkbox.")
    yield _submit(page)


def click_option(page: Page) -> Iterator[OracleStep]:
    (name,) = _quoted(page.query(), r"^Select (.*) and click Submit\.$")
    for label, radio in _labels(page):
        if label.text == name:
            yield page.click(radio, f"I need to select \"{name}\"; I click its radio button.",
                             f"Selected \"{name}\".")
            break
    else:
        raise OracleError(f"option {name!r} is not on the page")
    yield _submit(page)


def click_tab(page: Page) -> Iterator[OracleStep]:
    (n,) = _quoted(page.query(), r"Click on Tab #(\d+)")
    yield page.click(page.one("#area ul a", f"Tab #{n}"),
                     f"The task is to open Tab #{n}; I click its tab header.",
                     f"Clicked Tab #{n}.")


def click_dialog(page: Page) -> Iterator[OracleStep]:
    yield page.click(page.one(".ui-dialog-titlebar-close"),
                     "To close the dialog I click the \"x\" in its title bar.",
                     "Closed the dialog.")


def focus_text(page: Page) -> Iterator[OracleStep]:
    yield page.click(page.one("#tt"), "I click the text box to put the focus into it.",
                     "Focused the text box.")


def enter_text(page: Page) -> Iterator[OracleStep]:
    (text,) = _quoted(page.query(), r'Enter "(.*)" into the text field')
    yield from _type_into(page, "#tt", text, "text field")
    yield _submit(page)


def enter_password(page: Page) -> Iterator[OracleStep]:
    (pw,) = _quoted(page.query(), r'Enter the password "(.*)" into both')
    yield from _type_into(page, "#password", pw, "password field")
    yield from _type_into(page, "#verify", pw, "verify password field")
    yield _submit(page)


def login_user(page: Page) -> Iterator[OracleStep]:
    user, pw = _quoted(page.query(), r'username "(.*)" and the password "(.*)" into')
    yield from _type_into(page, "#username", user, "username field")
    yield from _type_into(page, "#password", pw, "password field")
    yield _submit(page, "Login")


def use_autocomplete(page: Page) -> Iterator[OracleStep]:
    q = page.query()
    start, end = _quoted(q, r'starts with "(.*?)"(?: and ends with "(.*?)")?\.')
    need = f"starts with \"{start}\"" + (f" and ends with \"{end}\"" if end else "")
    yield from _type_into(page, "#tags", start, "Tags field")
    # the list opens after a delay: wait on the DOM until the list for the whole typed prefix
    # offers the entry, then one Wait step, so that the screenshot before the pick shows the list
    # (the trajectory is the same each time)
    page.wait_settled("#tags", SUGGESTIONS, f"a suggestion that {need}", start, end or "")
    yield OracleStep(Wait(), "The suggestion list opens a moment after typing; I wait for it.",
                     "Waited for the suggestion list.")
    items = page.matching(SUGGESTIONS, start, end or "")
    if not items:
        raise OracleError(f"the suggestion list no longer offers one that {need}")
    choice = items[0]
    yield page.click(choice, f"The suggestion \"{choice.text}\" {need}; I pick it.",
                     f"Picked \"{choice.text}\".")
    yield _submit(page)


SOLVERS: dict[str, Solver] = {
    "click-button": click_button, "click-link": click_link, "click-test": click_test,
    "click-test-2": click_test_2, "click-color": click_color,
    "click-checkboxes": click_checkboxes, "click-option": click_option, "click-tab": click_tab,
    "click-dialog": click_dialog, "focus-text": focus_text, "enter-text": enter_text,
    "enter-password": enter_password, "login-user": login_user,
    "use-autocomplete": use_autocomplete,
}


def solver_for(task: str) -> Solver:
    try:
        return SOLVERS[task]
    except KeyError:
        raise ValueError(f"no oracle for MiniWoB task {task!r}; oracles: "
                         f"{', '.join(sorted(SOLVERS))}") from None

