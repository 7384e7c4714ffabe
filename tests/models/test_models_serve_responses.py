"""`venus serve` replies without HTTP: stop cuts, chunk streams, token bytes and pieces, the runner's ends.

The shapes here are what `test_models_serve_openai` checks through the official client; these tests
pin the edge cases a random tiny model rarely produces on its own: a stop string inside a token,
tokens that add no text (half a UTF-8 character, the end-of-turn token), and rows of one batch
that end at different steps.
"""

from __future__ import annotations

import copy
import doctest
import json
from typing import Any

import pytest

import venus_core.models.serve_responses as responses_mod
import venus_core.models.serve_tokens as tokens_mod
from venus_core.models.serve_protocol import Sampling
from venus_core.models.serve_responses import (Completion, TokenLogprob, TopLogprob, completion_body, sse_events,
                                               stream_chunks)
from venus_core.models.serve_runner import transformers_runner
from venus_core.models.serve_tokens import TokenTexts, byte_level_alphabet


def _lp(token: str, logprob: float) -> TokenLogprob:
    top = TopLogprob(token, tuple(token.encode()), logprob)
    return TokenLogprob(top, (top, TopLogprob("z", (122,), logprob - 1)))


def test_doctests() -> None:
    assert doctest.testmod(responses_mod).failed == 0 and doctest.testmod(tokens_mod).failed == 0


def test_stop_cuts_text_before_and_tokens_through_the_stop_string() -> None:
    c = Completion(("ab", "c]d", "ef", "gh"), "length", 3, tuple(_lp(t, -0.5) for t in ("ab", "c]d", "ef", "gh")))
    cut = c.cut(("e", "]d"))
    assert cut.text == "abc" and cut.pieces == ("ab", "c") and cut.finish_reason == "stop"
    assert cut.completion_tokens == 2 and cut.logprobs == c.logprobs[:2]  # type: ignore[index]
    assert c.cut(("zz",)) is c and c.cut(()) is c
    spanning = Completion(("x[", "1", "]", "y"), "stop", 3).cut(("[1]",))
    assert spanning.pieces == ("x", "", "") and spanning.completion_tokens == 3
    with pytest.raises(ValueError, match="logprobs for"):
        Completion(("a",), "stop", 1, ())


def test_bodies_and_stream_chunks() -> None:
    a = Completion(("Hi", "", " there", ""), "stop", 7, tuple(_lp(t, -0.25) for t in ("Hi", "\xe4", " there", "<e>")))
    b = Completion(("ok",), "length", 7, (_lp("ok", -1.0),))
    body = completion_body("id1", "tiny", 5, [a, b], top_logprobs=1)
    assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    entry = body["choices"][0]["logprobs"]["content"][0]
    assert entry == {"token": "Hi", "logprob": -0.25, "bytes": [72, 105],
                     "top_logprobs": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105]}]}
    assert completion_body("id1", "tiny", 5, [a])["choices"][0]["logprobs"] is None
    chunks = list(stream_chunks("id1", "tiny", 5, [a, b], top_logprobs=0, include_usage=True))
    deltas = [(ch["choices"][0]["index"], ch["choices"][0]["delta"], ch["choices"][0]["finish_reason"])
              for ch in chunks[:-1]]
    assert deltas[0] == (0, {"role": "assistant", "content": ""}, None)
    assert [d[1].get("content") for d in deltas if d[0] == 0][1:-1] == ["Hi", "", " there", ""]  # one per logprob
    assert deltas[5] == (0, {}, "stop") and deltas[-1] == (1, {}, "length")
    assert all(ch["usage"] is None for ch in chunks[:-1]) and chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["total_tokens"] == 12
    quiet = list(stream_chunks("id1", "tiny", 5, [a.cut(()), Completion(a.pieces, "stop", 7)]))
    assert "usage" not in quiet[0] and sum(1 for ch in quiet if ch["choices"][0]["delta"].get("content")) == 4
    events = list(sse_events(iter(chunks)))
    assert events[-1] == "data: [DONE]\n\n" and json.loads(events[0][6:]) == chunks[0]


def test_token_bytes_and_streaming_pieces(tiny) -> None:  # type: ignore[no-untyped-def]
    _, processor = tiny
    alphabet = byte_level_alphabet()
    assert len(alphabet) == 256 and sorted(alphabet.values()) == list(range(256))
    texts = TokenTexts(processor.tokenizer)
    text = "héllo 世界 [12,34] ✓"
    ids = list(processor.tokenizer(text, add_special_tokens=False)["input_ids"])
    end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    full, pieces = texts.text_pieces(ids + [end])
    assert full == text and "".join(pieces) == text and len(pieces) == len(ids) + 1
    assert "\ufffd" not in "".join(pieces) and "" in pieces[:-1] and pieces[-1] == ""  # a held-back half character
    raw = b"".join(bytes(texts.describe(i)[1]) for i in ids)
    assert raw == text.encode("utf-8")
    assert any(texts.describe(i)[0].startswith("bytes:\\x") for i in ids)  # a token holding part of a character
    assert texts.describe(end) == ("<|im_end|>", tuple(b"<|im_end|>"))
    assert texts.text_pieces([]) == ("", ())


def test_runner_ends_each_row_at_its_first_end_token(tiny) -> None:  # type: ignore[no-untyped-def]
    model, processor = tiny
    chats: list[list[dict[str, Any]]] = [[{"role": "user", "content": "open settings"}],
                                         [{"role": "user", "content": "go back"}]]
    greedy = Sampling(6, 0.0, 1.0, 1.0, None, logprobs=True)
    first = transformers_runner(model, processor)(chats, greedy)
    assert [c.finish_reason for c in first] == ["length", "length"] and all(c.completion_tokens == 6 for c in first)
    texts = TokenTexts(processor.tokenizer)
    stopper = copy.copy(model)  # shares the weights; only the generation config differs
    stopper.generation_config = copy.deepcopy(model.generation_config)
    by_bytes = {texts.describe(i)[1]: i for i in range(len(processor.tokenizer))}
    third = by_bytes[first[0].logprobs[2].chosen.bytes]  # type: ignore[index]
    assert third not in {by_bytes[e.chosen.bytes] for e in first[1].logprobs}  # type: ignore[union-attr]
    stopper.generation_config.eos_token_id = [third]
    ended = transformers_runner(stopper, processor)(chats, greedy)
    assert ended[0].finish_reason == "stop" and ended[0].completion_tokens == 3
    assert ended[0].pieces == first[0].pieces[:3] and ended[0].logprobs == first[0].logprobs[:3]  # type: ignore[index]
    assert ended[1] == first[1]  # the other row of the batch runs on to max_tokens
