"""The UI-Venus-1.5 prompts: exact upstream strings, history window and numbering, messages."""

from __future__ import annotations

import pytest
from PIL import Image

from venus_core.actions import Click, render_action
from venus_core.models.prompts import (
    MOBILE_USER_PROMPT,
    PROMPT_VERSION,
    WEB_USER_PROMPT,
    build_messages,
    grounding_prompt,
    navigation_prompt,
)

# Copied by hand from inclusionAI/UI-Venus models/grounding/ui_venus1_5_gd.py (refusal variant).
UPSTREAM_GROUNDING = (
    "Output the center point of the position corresponding to the following instruction: \n"
    "the blue Send button. \n\nThe output should just be the coordinates of a point, in the format "
    "[x,y]. Additionally, if the task is infeasible (e.g., the task is not related to the image), "
    "the output should be [-1,-1]."
)


def test_grounding_prompt_matches_upstream_and_drops_one_trailing_period() -> None:
    assert grounding_prompt("the blue Send button") == UPSTREAM_GROUNDING
    assert grounding_prompt("the blue Send button.") == UPSTREAM_GROUNDING
    assert grounding_prompt("a {b}") .count("a {b}. ") == 1
    with pytest.raises(ValueError, match="grounding instruction"):
        grounding_prompt("  ")


def test_prompt_version_is_set() -> None:
    assert PROMPT_VERSION.startswith("ui-venus-1.5")


def test_mobile_and_web_prompts_differ_in_action_list() -> None:
    mobile = navigation_prompt("Open Settings", [], "mobile")
    web = navigation_prompt("Open Settings", [], "web")
    assert mobile.startswith("\n**You are a GUI Agent.**  \nYour task is to analyze")
    assert "Scroll(start=(x1, y1), end=(x2, y2), direction='down/up/right/left')" in mobile
    assert "Hotkey(" not in mobile and "Hover(" not in mobile
    assert "- Scroll(direction='down or up')" in web and "- Hotkey(keys=['ctrl', 'c'])" in web
    assert "### Output Format\n<think> your thinking process </think>" in web
    for text in (mobile, web):
        assert "### User Task\nOpen Settings\n\n### Previous Actions\n\n\n" in text


def test_history_shows_last_five_numbered_over_the_episode() -> None:
    history = [(f"thought {i}", render_action(Click(box=(i, i)))) for i in range(1, 9)]
    text = navigation_prompt("g", history, "mobile")
    assert "Step 3:" not in text and "thought 3<" not in text
    lines = [ln for ln in text.splitlines() if ln.startswith("Step ")]
    assert lines[0] == "Step 4: <think>thought 4</think><action>Click(box=(4,4))</action>"
    assert [ln.split(":")[0] for ln in lines] == ["Step 4", "Step 5", "Step 6", "Step 7", "Step 8"]
    # A NavigationStep keeps only its window: history[0] is episode step 10 (0-based).
    windowed = navigation_prompt("g", history[-2:], "web", first_step=10)
    assert [ln.split(":")[0] for ln in windowed.splitlines() if ln.startswith("Step ")] == ["Step 11", "Step 12"]
    with pytest.raises(ValueError, match="first_step"):
        navigation_prompt("g", history, "web", first_step=-1)


def test_goal_with_braces_and_step_instruction() -> None:
    text = navigation_prompt("type {x} into {previous_actions}", [], "web", instruction="click the box")
    assert "### User Task\ntype {x} into {previous_actions}\nStep instruction: click the box\n" in text
    assert "{user_task}" not in text and text.count("### Previous Actions\n\n") == 1


def test_bad_platform_and_goal_are_errors() -> None:
    with pytest.raises(ValueError, match="platform"):
        navigation_prompt("g", [], "desktop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="goal"):
        navigation_prompt("", [], "mobile")


def test_templates_have_exactly_one_slot_each() -> None:
    for t in (MOBILE_USER_PROMPT, WEB_USER_PROMPT):
        assert t.count("{user_task}") == 1 and t.count("{previous_actions}") == 1


def test_build_messages_image_first_then_text() -> None:
    img = Image.new("RGB", (4, 4))
    msgs = build_messages(img, "hello", answer="[1,2]")
    assert msgs[0]["role"] == "user"
    assert [c["type"] for c in msgs[0]["content"]] == ["image", "text"]
    assert msgs[0]["content"][0]["image"] is img and msgs[0]["content"][1]["text"] == "hello"
    assert msgs[1] == {"role": "assistant", "content": [{"type": "text", "text": "[1,2]"}]}
    assert len(build_messages("shot.png", "x")) == 1
    with pytest.raises(TypeError):
        build_messages(b"png", "x")  # type: ignore[arg-type]
