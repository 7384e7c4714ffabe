"""`venus serve`'s vLLM extensions for RL clients: `return_tokens_as_token_ids`, `logit_bias`, `top_k`.

Why: an RL rollout client reads the sampled ids straight from the logprobs (`token_id:<id>`), bans
the tokens the learner never samples, and pins the sampler against generation-config defaults; each
has to behave exactly as vLLM's does, or the learner scores other tokens than were sampled. Checked
on loopback with the tiny model against an independent source: the same request without the
extension (greedy, so the answers are the same) and the tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from models_helpers import screen
from venus_core.models.openai_client import to_openai_messages
from venus_core.models.prompts import build_messages, grounding_prompt
from venus_core.models.serve_protocol import BadRequest, parse_chat_request
from venus_core.models.serve_runner import logits_size
from venus_core.models.serve_tokens import TokenTexts
from venus_core.models.server import BackgroundServer, create_app, transformers_runner


@pytest.fixture(scope="module")
def served(tiny: Any) -> Iterator[BackgroundServer]:
    model, processor = tiny
    with BackgroundServer(create_app(transformers_runner(model, processor), "tiny", max_batch=4, batch_wait_ms=2,
                                     vocab_size=logits_size(model))) as srv:
        yield srv


@pytest.fixture(scope="module")
def ids_default(tiny: Any) -> Iterator[BackgroundServer]:
    """A server started with vLLM's --return-tokens-as-token-ids."""
    model, processor = tiny
    with BackgroundServer(create_app(transformers_runner(model, processor), "tiny", max_batch=4, batch_wait_ms=2,
                                     return_tokens_as_token_ids=True)) as srv:
        yield srv


def _body(**extra: Any) -> dict[str, Any]:
    chat = build_messages(screen((60, 90, 160), (96, 128)), grounding_prompt("the blue button"))
    return {"model": "tiny", "messages": to_openai_messages(chat), "max_tokens": 8, "temperature": 0, **extra}


def _post(srv: BackgroundServer, body: dict[str, Any]) -> requests.Response:
    return requests.post(srv.base_url + "/chat/completions", json=body, timeout=60)


def _content(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return reply["choices"][0]["logprobs"]["content"]


def test_tokens_read_token_id_and_name_the_generated_ids(tiny: Any, served: BackgroundServer) -> None:
    _, processor = tiny
    texts = TokenTexts(processor.tokenizer)
    by_bytes = {texts.describe(i)[1]: i for i in range(len(processor.tokenizer))}
    plain = _post(served, _body(logprobs=True, top_logprobs=3)).json()
    as_ids = _post(served, _body(logprobs=True, top_logprobs=3, return_tokens_as_token_ids=True)).json()
    assert as_ids["choices"][0]["message"] == plain["choices"][0]["message"]
    ids = []
    for mine, ref in zip(_content(as_ids), _content(plain), strict=True):
        token = by_bytes[tuple(ref["bytes"])]
        assert mine["token"] == f"token_id:{token}" and mine["token"] != ref["token"]
        assert mine["bytes"] == ref["bytes"] and mine["logprob"] == ref["logprob"]  # chosen: its text's bytes
        for alt, ref_alt in zip(mine["top_logprobs"], ref["top_logprobs"], strict=True):
            name = f"token_id:{by_bytes[tuple(ref_alt['bytes'])]}"
            assert alt == {"token": name, "logprob": ref_alt["logprob"], "bytes": list(name.encode())}  # vLLM's
        ids.append(token)
    assert len(ids) == as_ids["usage"]["completion_tokens"] == 8
    decoded = processor.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    assert decoded == as_ids["choices"][0]["message"]["content"]


def test_streamed_entries_equal_the_non_streamed_ones(served: BackgroundServer) -> None:
    body = _body(logprobs=True, top_logprobs=2, return_tokens_as_token_ids=True)
    whole = _content(_post(served, body).json())
    raw = requests.post(served.base_url + "/chat/completions", json={**body, "stream": True}, stream=True, timeout=60)
    events = [json.loads(line[6:]) for line in raw.iter_lines(decode_unicode=True)
              if line and line.startswith("data: ") and line != "data: [DONE]"]
    streamed = [e for ev in events for c in ev["choices"] if c.get("logprobs") for e in c["logprobs"]["content"]]
    assert streamed == whole and all(e["token"].startswith("token_id:") for e in streamed)


def test_without_logprobs_the_flag_changes_nothing(served: BackgroundServer) -> None:
    """vLLM: the flag only renames logprobs tokens; with logprobs off the reply is the plain one."""
    plain = _post(served, _body()).json()
    flagged = _post(served, _body(return_tokens_as_token_ids=True))
    assert flagged.status_code == 200
    reply = flagged.json()
    assert reply["choices"][0]["logprobs"] is None and plain["choices"][0]["logprobs"] is None
    assert reply["choices"][0]["message"] == plain["choices"][0]["message"] and reply["usage"] == plain["usage"]
    unset = _content(_post(served, _body(return_tokens_as_token_ids=None, logprobs=True)).json())
    assert unset == _content(_post(served, _body(logprobs=True)).json())  # null: the server's default (off)


def test_the_server_default_and_the_request_override(ids_default: BackgroundServer) -> None:
    default = _content(_post(ids_default, _body(logprobs=True)).json())
    assert all(e["token"].startswith("token_id:") for e in default)
    off = _content(_post(ids_default, _body(logprobs=True, return_tokens_as_token_ids=False)).json())
    assert not any(e["token"].startswith("token_id:") for e in off) and len(off) == len(default)


@pytest.mark.parametrize(("patch", "param", "words"), [
    ({"return_tokens_as_token_ids": "yes"}, "return_tokens_as_token_ids", "true, false or null"),
    ({"return_tokens_as_token_ids": 1}, "return_tokens_as_token_ids", "true, false or null"),
    ({"logit_bias": [5, -100]}, "logit_bias", "must be an object"),
    ({"logit_bias": {"abc": -100}}, "logit_bias.abc", "decimal integers"),
    ({"logit_bias": {"-3": -100}}, "logit_bias.-3", "decimal integers"),
    ({"logit_bias": {"100000": -100}}, "logit_bias.100000", "out of the vocabulary"),
    ({"logit_bias": {"5": -101}}, "logit_bias.5", "[-100, 100]"),
    ({"logit_bias": {"5": "x"}}, "logit_bias.5", "must be a number"),
    ({"top_k": -2}, "top_k", "between -1"),
    ({"top_k": 2.5}, "top_k", "integer"),
    ({"min_p": 0.1}, "min_p", "only 0"),
])
def test_bad_extension_values_are_400_naming_the_field(served: BackgroundServer, patch: dict[str, Any],
                                                       param: str, words: str) -> None:
    resp = _post(served, _body(**patch))
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and words in error["message"]


def test_logit_bias_bans_and_forces_tokens(tiny: Any, served: BackgroundServer) -> None:
    model, _ = tiny
    ids = {"logprobs": True, "return_tokens_as_token_ids": True}
    first = int(_content(_post(served, _body(**ids)).json())[0]["token"][len("token_id:"):])
    banned = _content(_post(served, _body(**ids, logit_bias={str(first): -100})).json())
    assert banned[0]["token"] != f"token_id:{first}"
    forced = _content(_post(served, _body(**ids, temperature=1.0, seed=3, logit_bias={"17": 100})).json())
    assert [e["token"] for e in forced] == ["token_id:17"] * 8
    assert all(e["logprob"] > -1e-3 for e in forced)  # sampled logprobs see the bias (vLLM processed logprobs)
    assert logits_size(model) == model.get_output_embeddings().weight.shape[0]


def test_parsing_of_top_k_and_logit_bias() -> None:
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert parse_chat_request({**base, "top_k": -1}, served="m", max_n=2).sampling.top_k == 0
    assert parse_chat_request({**base, "top_k": 5}, served="m", max_n=2).sampling.top_k == 5
    req = parse_chat_request({**base, "logit_bias": {"9": -100, "3": 2, "4": 0}}, served="m", max_n=2, vocab_size=10)
    assert req.sampling.logit_bias == ((3, 2.0), (9, -100.0))  # sorted, zeros dropped: a stable batch key
    assert req.tokens_as_ids is None
    with pytest.raises(BadRequest, match="out of the vocabulary"):
        parse_chat_request({**base, "logit_bias": {"10": 1}}, served="m", max_n=2, vocab_size=10)


def test_top_k_one_samples_the_greedy_answer(served: BackgroundServer) -> None:
    def answer(**extra: Any) -> str:
        return str(_post(served, _body(**extra)).json()["choices"][0]["message"]["content"])

    greedy = answer()
    top1 = answer(temperature=1.0, seed=5, top_k=1)
    free = [answer(temperature=1.0, seed=s, top_k=-1) for s in (5, 6)]
    assert top1 == greedy and any(f != greedy for f in free)
