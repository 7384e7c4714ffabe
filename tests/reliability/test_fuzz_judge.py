"""Fuzz the judge-response parser: a chat-completion HTTP body, its choices, the judgement inside.

Input: the bytes of a 200 reply's body, as `ChatClient.post_json` gets them: valid completions
whose message is a judgement with hostile edits (structure or text, optional ```json fence),
mangled completion objects and arbitrary bytes. The path is the client's own: `reply_json` →
`completion_texts` → `protocol.parse_reply`. Documented errors: `ChatError` (the body is not
JSON), `ValueError` from `completion_texts` (not a chat completion; the client turns it into a
ChatError) and `JudgeReplyError` (the text is not one valid judgement). An accepted judgement has
scores in 0..10 and only the proposal keys its record kind allows.
"""

from __future__ import annotations

import json

import pytest
from fuzz_helpers import BUDGETS, DEEP_JSON, HUGE_INT_TEXT, Budget, fuzz, mutated, mutated_text
from hypothesis import strategies as st

from venus_core.models.openai_client import ChatError, completion_texts, reply_json
from venus_core.scoring.protocol import PROPOSAL_KEYS, JudgeReplyError, parse_reply

KINDS = st.sampled_from(sorted(PROPOSAL_KEYS))
VERDICT = st.builds(
    lambda a, r, why, proposal: {"alignment": a, "reachability": r, "rationale": why, "proposal": proposal},
    st.integers(0, 10), st.integers(0, 10), st.text(max_size=30),
    st.one_of(st.none(), st.dictionaries(st.sampled_from(["instruction", "goal", "action", "question", "answer"]),
                                         st.text(max_size=10), max_size=2)),
)


def _fence(text: str, fenced: bool) -> str:
    return f"```json\n{text}\n```" if fenced else text


REPLY_TEXT = st.one_of(
    st.builds(_fence, VERDICT.map(json.dumps), st.booleans()),
    st.builds(_fence, VERDICT.flatmap(mutated).map(lambda v: json.dumps(v, allow_nan=True)), st.booleans()),
    VERDICT.map(json.dumps).flatmap(mutated_text),
    st.sampled_from([HUGE_INT_TEXT, DEEP_JSON, '{"alignment": ' + HUGE_INT_TEXT + "}", "", "```json\n```",
                     '{"alignment": NaN, "reachability": 1, "rationale": ""}']),
    st.text(max_size=100),
)


def _completion(texts: list[object], indices: list[object] | None) -> dict[str, object]:
    choices = [{"index": i if indices is None else indices[i % len(indices)],
                "message": {"role": "assistant", "content": t}} for i, t in enumerate(texts)]
    return {"id": "x", "object": "chat.completion", "choices": choices}


COMPLETION = st.builds(
    _completion, st.lists(st.one_of(REPLY_TEXT, st.none(), st.integers()), min_size=1, max_size=3),
    st.one_of(st.none(), st.lists(st.one_of(st.integers(), st.text(max_size=2), st.none()), min_size=1, max_size=3)),
)
BODY = st.one_of(
    COMPLETION.map(lambda c: json.dumps(c).encode()),
    COMPLETION.flatmap(mutated).map(lambda c: json.dumps(c, allow_nan=True).encode()),
    COMPLETION.map(json.dumps).flatmap(mutated_text).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=200),
    st.sampled_from([DEEP_JSON.encode(), HUGE_INT_TEXT.encode(), b"\xff\xfe{}", b""]),
)


def check_body(args: tuple[bytes, str]) -> str:
    body, kind = args
    try:
        texts = completion_texts(reply_json(body, "fuzz"))
    except ChatError:
        return "ChatError"
    except ValueError:
        return "ValueError (not a chat completion)"
    try:
        j = parse_reply(texts[0], kind, "fuzz-judge")
    except JudgeReplyError:
        return "JudgeReplyError"
    assert 0 <= j.alignment <= 10 and 0 <= j.reachability <= 10
    assert j.proposal is None or set(j.proposal) <= set(PROPOSAL_KEYS[kind])
    return "accepted"


@pytest.mark.parametrize("budget", BUDGETS)
def test_judge_response_parser(budget: Budget) -> None:
    tally = fuzz("judge-response parser", st.tuples(BODY, KINDS), check_body, budget)
    assert tally.outcomes["accepted"] > 0 and tally.outcomes["JudgeReplyError"] > 0
