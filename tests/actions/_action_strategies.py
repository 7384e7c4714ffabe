"""Hypothesis strategies for actions (shared by the tests/actions property tests).

Why a module: every property test needs the same generator of *valid* actions, including arbitrary
unicode content, so that round-trip and idempotence properties cover the whole action space.
"""

from __future__ import annotations

from hypothesis import strategies as st

from venus_core.actions import (
    CallUser,
    Click,
    DoubleClick,
    Drag,
    Finished,
    Hotkey,
    Hover,
    Launch,
    LongPress,
    PressBack,
    PressEnter,
    PressHome,
    PressRecent,
    Scroll,
    Type,
    Wait,
)

coord = st.integers(min_value=0, max_value=1000)
points = st.tuples(coord, coord)
# Any unicode text (controls, quotes, backslashes, newlines, CJK, emoji...); lone surrogates are
# excluded because they are not valid text (pydantic rejects them in str fields).
texts = st.text(alphabet=st.characters(codec=None, exclude_categories=("Cs",)), max_size=40)
nonblank = texts.filter(lambda s: s.strip() != "")
directions = st.sampled_from(["up", "down", "left", "right"])
keys = st.lists(
    st.text(min_size=1, max_size=8).filter(lambda s: s.strip() != ""),
    min_size=1,
    max_size=3,
    unique=True,
).map(tuple)

mobile_actions = st.one_of(
    st.builds(Click, box=points),
    st.builds(Drag, start=points, end=points),
    st.builds(Scroll, start=points, end=points, direction=directions),
    st.builds(Type, content=texts),
    st.builds(Launch, app=nonblank),
    st.just(Wait()),
    st.builds(Finished, content=texts),
    st.builds(CallUser, content=texts),
    st.builds(LongPress, box=points),
    st.just(PressBack()),
    st.just(PressHome()),
    st.just(PressEnter()),
    st.just(PressRecent()),
)

web_actions = st.one_of(
    st.builds(Click, box=points),
    st.builds(Drag, start=points, end=points),
    st.builds(Scroll, direction=directions),
    st.builds(Scroll, start=points, direction=directions),
    st.builds(Scroll, start=points, end=points, direction=directions),
    st.builds(Type, content=texts),
    st.builds(Launch, url=nonblank),
    st.just(Wait()),
    st.builds(Finished, content=texts),
    st.builds(CallUser, content=texts),
    st.builds(LongPress, box=points),
    st.just(PressEnter()),
    st.builds(Hover, box=points),
    st.builds(DoubleClick, box=points),
    st.builds(Hotkey, keys=keys),
)

platform_actions = st.one_of(
    mobile_actions.map(lambda a: ("mobile", a)), web_actions.map(lambda a: ("web", a))
)
