"""The UI-Venus-1.5 prompts: grounding, mobile navigation and web navigation, and chat messages.

Why here, word for word: a fine-tuned UI-Venus checkpoint answers well only to the prompt it was
trained on, and the published checkpoints are evaluated with these exact strings, so training,
rollouts and evaluation must all build their prompts through this module.

Sources (public repository inclusionAI/UI-Venus, inference code only):
- grounding: `models/grounding/ui_venus1_5_gd.py`, `UIVenusGroundV15.inference` — the prompt with
  the refusal sentence (`[-1,-1]`), a trailing '.' of the instruction is dropped before formatting;
  the message is one user turn holding the image first, then the text.
- navigation: `models/navigation/utils.py`, `MOBILE_USER_PROMPT` and `WEB_USER_PROMPT` (their
  typos, e.g. "the the current screenshot", and trailing spaces kept on purpose), filled by
  `models/navigation/ui_venus_navi_agent.py`, `VenusNaviAgent._build_query`.

Departures from the repository:
- history lines come from `venus_core.actions.render_history` (last 5 steps, numbered from 1 over
  the whole episode, as the UI-Venus-1.5 report describes it); the repository's agent numbers the shown
  steps from 0 (`enumerate(recent_history)`);
- the repository prompt has no slot for a step-level instruction (AndroidControl's "low-level"
  setting); when `instruction` is given it is appended to the user task as a second line
  `Step instruction: …`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from PIL import Image

from venus_core.actions import Action, render_history

PROMPT_VERSION = "ui-venus-1.5/2026-02"
"""Changes whenever any prompt string below changes; recorded with datasets and checkpoints."""

HISTORY_STEPS = 5
"""Earlier steps shown in a navigation prompt (UI-Venus-1.5: the last 5)."""

NavPlatform = Literal["mobile", "web"]

GROUNDING_PROMPT = (
    "Output the center point of the position corresponding to the following instruction: \n{}. "
    "\n\nThe output should just be the coordinates of a point, in the format [x,y]. "
    "Additionally, if the task is infeasible (e.g., the task is not related to the image), "
    "the output should be [-1,-1]."
)

WEB_USER_PROMPT = """
**You are a GUI Agent.**
Your task is to analyze a given user task, review current screenshot and previous actions, and determine the next action to complete the task.

### Available Actions
You may execute one of the following functions:
- Click(box=(x1,y1))
- Drag(start=(x1,y1), end=(x2,y2))
- Scroll(direction='down or up')
- Type(content='')
- Launch(app='' or url='')
- Wait()
- Finished(content='')
- CallUser(content='')
- LongPress(box=(x1,y1))
- PressBack()
- PressHome()
- PressEnter()
- PressRecent()
- Hover(box=(x1,y1))
- DoubleClick(box=(x1,y1))
- Hotkey(keys=['ctrl', 'c']) # Split keys with comma and wrap each key in single quotes. Do not use more than 3 keys in one Hotkey action.

### User Task
{user_task}

### Previous Actions
{previous_actions}

### Output Format
<think> your thinking process </think>
<action> the next action </action>
<conclusion> the conclusion about the next action </conclusion>

### Instruction
- Make sure you understand the task goal to avoid wrong actions.
- Make sure you carefully examine the the current screenshot. Sometimes the summarized history might not be reliable, over-claiming some effects.
- For complex information-retrieval tasks, use `CallUser(content='...')` to reply only at the very end, after gathering all required info. Combine web evidence with your reasoning.
- To input text: first `Click(box=...)` on the textbox, then `Type(content='...')`. The system automatically presses `ENTER` afterward. If search filters are needed, click the search button after typing.
- Try to use simple language when searching.
- Distinguish textbox from button: never `Type` into a button. If no textbox is visible, try clicking the search icon first — the input field may appear afterward.
- Execute only one action per step.
- Strictly avoid repeating the same action when the webpage remains unchanged — you may have executed the wrong action. Continuous use of `Wait()` is also NOT allowed.
"""

MOBILE_USER_PROMPT = """
**You are a GUI Agent.**  
Your task is to analyze a given user task, review current screenshot and previous actions, and determine the next action to complete the task.

### User Task
{user_task}

### Previous Actions
{previous_actions}

### Available Actions
You may execute one of the following functions:
Click(box=(x1, y1))
Drag(start=(x1, y1), end=(x2, y2))
Scroll(start=(x1, y1), end=(x2, y2), direction='down/up/right/left')
Type(content='')
Launch(app='')
Wait()
Finished(content='')
CallUser(content='')
LongPress(box=(x1, y1))
PressBack()
PressHome()
PressEnter()
PressRecent()

### Instruction
- Make sure you understand the task goal to avoid wrong actions.
- Make sure you carefully examine the the current screenshot. Sometimes the summarized history might not be reliable, over-claiming some effects.
- For requests that are questions (or chat messages), remember to use the `CallUser` action to reply to user explicitly before finishing! Then, after you have replied, use the Finished action if the goal is achieved.
- Consider exploring the screen by using the `scroll` action with different directions to reveal additional content.
- To copy some text: first select the exact text you want to copy, which usually also brings up the text selection bar, then click the `copy` button in bar.
- To paste text into a text box, first long press the text box, then usually the text selection bar will appear with a `paste` button in it.
- You first thinks about the reasoning process in the mind, then provide the action. The reasoning and action are enclosed in <think></think> and <action></action> tags respectively. After providing action, summarize your action in <conclusion></conclusion> tags
"""

_NAV_PROMPTS: dict[str, str] = {"mobile": MOBILE_USER_PROMPT, "web": WEB_USER_PROMPT}

_SLOT = re.compile(r"\{(user_task|previous_actions)\}")

ImageInput = Image.Image | str | Path
"""A screenshot: a PIL image, or the path of an image file."""


def _require_text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return value


def grounding_prompt(instruction: str) -> str:
    """The UI-Venus-1.5 grounding prompt for `instruction` (one trailing '.' dropped, as upstream)."""
    text = _require_text(instruction, "grounding instruction")
    if text.endswith("."):
        text = text[:-1]
    return GROUNDING_PROMPT.format(text)


def navigation_prompt(
    goal: str,
    history: Sequence[tuple[str, Action | str]],
    platform: NavPlatform,
    instruction: str | None = None,
    first_step: int = 0,
) -> str:
    """The UI-Venus-1.5 navigation prompt: goal, last 5 (think, action) steps, action list.

    `history` is the episode's earlier steps, oldest first, as (think, action) pairs; only the last
    `HISTORY_STEPS` are shown. `first_step` is the 0-based episode index of `history[0]` (a
    NavigationStep keeps only its last few steps), so lines are numbered as in the whole episode.
    `platform` picks the mobile or the web prompt.
    """
    template = _NAV_PROMPTS.get(platform)
    if template is None:
        raise ValueError(f"navigation platform must be 'mobile' or 'web', got {platform!r}")
    task = _require_text(goal, "navigation goal")
    if instruction is not None and instruction.strip():
        task = f"{task}\nStep instruction: {instruction.strip()}"
    if isinstance(first_step, bool) or not isinstance(first_step, int) or first_step < 0:
        raise ValueError(f"first_step must be an integer >= 0, got {first_step!r}")
    shown = list(history)[-HISTORY_STEPS:] if history else []
    # render_history numbers lines by list position: pad with placeholders that are never shown.
    skipped = first_step + len(history) - len(shown)
    previous = render_history([("", "Wait()")] * skipped + shown, last=len(shown))
    # One pass over the template (not str.format / chained replace): goals and thoughts may
    # contain braces or even the slot names themselves.
    slots = {"user_task": task, "previous_actions": previous}
    return _SLOT.sub(lambda m: slots[m.group(1)], template)


def build_messages(image: ImageInput, prompt: str, answer: str | None = None) -> list[dict[str, Any]]:
    """Chat messages for the processor: one user turn (image, then text), optionally the answer.

    The answer, when given, becomes an assistant turn with plain-text content (used by SFT data).
    """
    if not isinstance(image, (Image.Image, str, Path)):
        raise TypeError(f"image must be a PIL image or a path, got {type(image).__name__}")
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [{"type": "image", "image": image}, {"type": "text", "text": prompt}],
        }
    ]
    if answer is not None:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    return messages
