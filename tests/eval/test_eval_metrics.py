from __future__ import annotations

import doctest

import pytest

import venus_core.eval.metrics as metrics
from venus_core.eval.metrics import NAV_DISTANCE, Rate, score_grounding, score_navigation, wilson


def test_doctests() -> None:
    r = doctest.testmod(metrics)
    assert r.attempted >= 4 and r.failed == 0


def test_wilson_properties() -> None:
    for n in (1, 10, 200):
        for k in range(0, n + 1, max(1, n // 7)):
            lo, hi = wilson(k, n)
            assert 0 <= lo <= k / n <= hi <= 1
    assert wilson(5, 10)[1] - wilson(5, 10)[0] > wilson(500, 1000)[1] - wilson(500, 1000)[0]
    with pytest.raises(ValueError):
        wilson(3, 2)
    assert str(Rate(1, 2)).startswith("50.0% [")


@pytest.mark.parametrize(
    ("answer", "box", "parsed", "refused", "correct"),
    [("[5,5]", (0, 0, 10, 10), True, False, True), ("[10,10]", (0, 0, 10, 10), True, False, True),
     ("[11,10]", (0, 0, 10, 10), True, False, False), ("[-1,-1]", (0, 0, 10, 10), True, True, False),
     ("[-1,-1]", None, True, True, True), ("[3,3]", None, True, False, False), ("nah", None, False, False, False)],
)
def test_grounding(answer: str, box, parsed: bool, refused: bool, correct: bool) -> None:
    o = score_grounding(answer, box)
    assert (o.parsed, o.refused, o.correct) == (parsed, refused, correct)


def nav(a: str) -> str:
    return f"<think>x</think><action>{a}</action><conclusion>y</conclusion>"


@pytest.mark.parametrize(
    ("pred", "ref", "box", "type_ok", "success"),
    [
        ("Click(box=(500,500))", "Click(box=(500,690))", None, True, True),  # 190 < 198
        ("Click(box=(500,500))", "Click(box=(500,700))", None, True, False),  # 200 > 198
        ("Click(box=(500,500))", "Click(box=(900,900))", (450, 450, 550, 550), True, True),
        ("Click(box=(600,600))", "Click(box=(500,500))", (450, 450, 550, 550), True, False),
        ("Scroll(start=(1,1),end=(1,0),direction='up')", "Scroll(start=(500,800),end=(500,200),direction='up')", None, True, True),
        ("Scroll(start=(500,800),end=(500,200),direction='down')", "Scroll(start=(500,800),end=(500,200),direction='up')", None, True, False),
        ("Type(content='hello world')", "Type(content='hello')", None, True, True),
        ("Type(content='goodbye')", "Type(content='hello')", None, True, False),
        ("PressBack()", "PressBack()", None, True, True),
        ("PressBack()", "PressHome()", None, False, False),
        ("Launch(app='Shop')", "Launch(app='shop')", None, True, True),
    ],
)
def test_navigation(pred: str, ref: str, box, type_ok: bool, success: bool) -> None:
    o = score_navigation(nav(pred), ref, "mobile", box)
    assert (o.parsed, o.type_match, o.step_success) == (True, type_ok, success)


def test_navigation_unparseable_and_bare_action() -> None:
    assert score_navigation("I would click", "Wait()", "mobile").parsed is False
    assert score_navigation("Wait()", "Wait()", "mobile").step_success
    assert round(NAV_DISTANCE) == 198
