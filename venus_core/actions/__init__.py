"""The unified action space of UI-Venus-1.5 (Table 8): types, platform rules, text formats, frames.

Why one package: every stage that produces or consumes actions (data import and synthesis, rewards,
environments, evaluation) must agree on one vocabulary, one canonical text form and one coordinate
frame. Importing this package registers the "mobile" and "web" rule sets in `ACTION_SPACES` (it is
listed as a `venus_core.plugins` entry point).

Modules: `space` (action types, errors), `rules` (platform rule sets), `render` (canonical text),
`parse` (action text -> Action), `nav` (navigation answers, history lines, grounding points),
`coords` (0–1000 frame <-> pixels, Qwen smart_resize).
"""

from venus_core.actions.coords import (
    box_from_pixels,
    box_to_pixels,
    from_pixels,
    from_resized_pixels,
    smart_resize,
    to_pixels,
)
from venus_core.actions.nav import (
    REFUSAL,
    NavStep,
    Refusal,
    parse_navigation,
    parse_point,
    render_history,
    render_navigation,
    render_point,
)
from venus_core.actions.parse import MAX_ACTION_CHARS, parse_action
from venus_core.actions.render import render_action
from venus_core.actions.rules import MOBILE, SPACES, WEB, ActionSpace, Rule, validate_action
from venus_core.actions.space import (
    ACTION_TYPES,
    PLATFORMS,
    Action,
    ActionParseError,
    ActionValidationError,
    CallUser,
    Click,
    DoubleClick,
    Drag,
    Finished,
    Hotkey,
    Hover,
    Launch,
    LongPress,
    Platform,
    Point,
    PressBack,
    PressEnter,
    PressHome,
    PressRecent,
    Scroll,
    Type,
    Wait,
)

__all__ = [
    "ACTION_TYPES",
    "MAX_ACTION_CHARS",
    "MOBILE",
    "PLATFORMS",
    "REFUSAL",
    "SPACES",
    "WEB",
    "Action",
    "ActionParseError",
    "ActionSpace",
    "ActionValidationError",
    "CallUser",
    "Click",
    "DoubleClick",
    "Drag",
    "Finished",
    "Hotkey",
    "Hover",
    "Launch",
    "LongPress",
    "NavStep",
    "Platform",
    "Point",
    "PressBack",
    "PressEnter",
    "PressHome",
    "PressRecent",
    "Refusal",
    "Rule",
    "Scroll",
    "Type",
    "Wait",
    "box_from_pixels",
    "box_to_pixels",
    "from_pixels",
    "from_resized_pixels",
    "parse_action",
    "parse_navigation",
    "parse_point",
    "render_action",
    "render_history",
    "render_navigation",
    "render_point",
    "smart_resize",
    "to_pixels",
    "validate_action",
]
