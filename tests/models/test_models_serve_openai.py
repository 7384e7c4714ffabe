"""`venus serve` through the official `openai` client: usage, streaming, logprobs, n, and 400s.

Why the official client: it is what rollout workers, notebooks and third-party tools use, and it
parses replies into typed models, so a field of the wrong shape fails here rather than in a user's
hands. Each number is checked against an independent computation with the tiny model on loopback:
`usage` against the processor's own encoding (image tokens included), streamed deltas against the
non-streamed greedy content, and logprobs against forward passes of the model (greedy: log-softmax
of the raw logits; sampling: of the penalised, tempered, top-p-cut distribution that was sampled).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import requests
import torch
from transformers import RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopPLogitsWarper

from models_helpers import screen
from venus_core.models.batches import message_images
from venus_core.models.generation import generate
from venus_core.models.openai_client import to_openai_messages
from venus_core.models.prompts import build_messages, grounding_prompt
from venus_core.models.server import BackgroundServer, create_app, transformers_runner
from venus_core.models.serve_tokens import TokenTexts

TOL = 1e-4


@pytest.fixture(scope="module")
def served(tiny) -> Iterator[BackgroundServer]:  # type: ignore[no-untyped-def]
    model, processor = tiny
    with BackgroundServer(create_app(transformers_runner(model, processor), "tiny", max_batch=4,
                                     batch_wait_ms=2)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(served: BackgroundServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0, timeout=120)


def _chat(i: int = 0) -> list[dict[str, Any]]:
    return build_messages(screen((40 + 30 * i, 90, 160), (96, 128)), grounding_prompt(f"the button {i}"))


def _encode(processor: Any, chat: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """The prompt as the processor encodes it on its own (not through the server's code)."""
    text = processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    images = message_images(chat)
    enc = processor(text=[text], images=images or None, return_tensors="pt")
    inputs = {k: v for k, v in enc.items() if k in ("input_ids", "pixel_values", "image_grid_thw", "mm_token_type_ids")}
    if "mm_token_type_ids" not in inputs:
        image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        inputs["mm_token_type_ids"] = (inputs["input_ids"] == image_id).long()
    return inputs


@torch.inference_mode()
def _next_logits(model: Any, prompt: dict[str, torch.Tensor], generated: list[int]) -> torch.Tensor:
    """Raw next-token logits after prompt + generated, by one full forward pass (no cache)."""
    extra = torch.tensor([generated], dtype=torch.long)
    ids = torch.cat([prompt["input_ids"], extra], dim=1)
    inputs = {**prompt, "input_ids": ids, "attention_mask": torch.ones_like(ids),
              "mm_token_type_ids": torch.cat([prompt["mm_token_type_ids"], torch.zeros_like(extra)], dim=1)}
    return model(**inputs).logits[0, -1].float()


def _ids_by_bytes(processor: Any) -> dict[tuple[int, ...], int]:
    texts = TokenTexts(processor.tokenizer)
    table = {texts.describe(i)[1]: i for i in range(len(processor.tokenizer))}
    assert len(table) == len(processor.tokenizer)  # every token's bytes are distinct: bytes name the token
    return table


def test_usage_counts_prompt_image_tokens_and_every_choice(tiny, client) -> None:  # type: ignore[no-untyped-def]
    model, processor = tiny
    chat = _chat(1)
    prompt_tokens = _encode(processor, chat)["input_ids"].shape[1]
    image_pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int((_encode(processor, chat)["input_ids"] == image_pad).sum()) > 0
    reply = client.chat.completions.create(model="tiny", messages=to_openai_messages(chat), max_tokens=7,
                                           temperature=0, logprobs=True)
    assert reply.object == "chat.completion" and reply.usage is not None
    [choice] = reply.choices
    assert choice.logprobs is not None and choice.logprobs.content is not None
    generated = len(choice.logprobs.content)
    assert reply.usage.prompt_tokens == prompt_tokens
    assert reply.usage.completion_tokens == generated and reply.usage.total_tokens == prompt_tokens + generated
    assert (choice.finish_reason == "length") == (generated == 7)
    text_only = [{"role": "user", "content": "hello"}]
    many = client.chat.completions.create(model="tiny", messages=text_only, max_tokens=5, temperature=1.0, n=3, seed=4,
                                          logprobs=True)
    assert many.usage is not None and len(many.choices) == 3 and [c.index for c in many.choices] == [0, 1, 2]
    assert many.usage.prompt_tokens == _encode(processor, text_only)["input_ids"].shape[1]  # counted once
    per_choice = [len(c.logprobs.content or []) for c in many.choices if c.logprobs is not None]
    assert len(per_choice) == 3 and many.usage.completion_tokens == sum(per_choice)
    assert many.usage.total_tokens == many.usage.prompt_tokens + many.usage.completion_tokens


def test_stream_replays_the_greedy_completion(client, served) -> None:  # type: ignore[no-untyped-def]
    messages = to_openai_messages(_chat(2))
    kw: dict[str, Any] = {"model": "tiny", "messages": messages, "max_tokens": 12, "temperature": 0,
                          "extra_body": {"repetition_penalty": 1.05}}
    full = client.chat.completions.create(**kw, n=2)
    chunks = list(client.chat.completions.create(**kw, n=2, stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    *body, last = chunks
    assert last.choices == [] and last.usage is not None and full.usage is not None
    assert last.usage.model_dump() == full.usage.model_dump()
    for index in (0, 1):
        mine = [c.choices[0] for c in body if c.choices and c.choices[0].index == index]
        assert mine[0].delta.role == "assistant" and all(m.delta.role is None for m in mine[1:])
        assert mine[-1].finish_reason == full.choices[index].finish_reason
        assert all(m.finish_reason is None for m in mine[:-1])
        assert "".join(m.delta.content or "" for m in mine) == full.choices[index].message.content
    assert full.choices[0].message.content  # not trivially empty
    plain = list(client.chat.completions.create(**kw, stream=True))
    assert all(c.usage is None and c.choices for c in plain)  # no usage chunk unless asked for
    assert "".join(c.choices[0].delta.content or "" for c in plain) == full.choices[0].message.content
    assert len(full.choices[0].message.content or "") >= 5
    stop = full.choices[0].message.content[3:5]  # type: ignore[index]
    cut = client.chat.completions.create(**kw, stop=[stop])
    streamed = list(client.chat.completions.create(**kw, stop=[stop], stream=True))
    assert cut.choices[0].finish_reason == "stop" == streamed[-1].choices[0].finish_reason
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == cut.choices[0].message.content
    plain_kw = {k: v for k, v in kw.items() if k != "extra_body"}
    raw = requests.post(served.base_url + "/chat/completions", json={**plain_kw, "stream": True}, stream=True,
                        timeout=60)
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = [line for line in raw.iter_lines(decode_unicode=True) if line]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    assert json.loads(events[0][6:])["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    scored = client.chat.completions.create(**kw, logprobs=True, top_logprobs=2)
    scored_stream = list(client.chat.completions.create(**kw, logprobs=True, top_logprobs=2, stream=True))
    streamed_entries = [e for c in scored_stream if c.choices and c.choices[0].logprobs is not None
                        for e in c.choices[0].logprobs.content or []]
    assert scored.choices[0].logprobs is not None and streamed_entries == scored.choices[0].logprobs.content
    assert "".join(c.choices[0].delta.content or "" for c in scored_stream) == full.choices[0].message.content


@pytest.mark.parametrize("penalty", [1.0, 1.3])
def test_greedy_logprobs_equal_a_forward_pass(tiny, client, penalty: float) -> None:  # type: ignore[no-untyped-def]
    """Greedy logprobs are the log-softmax of the raw logits, whatever the repetition penalty that
    picked the token (argmax of the penalised logits)."""
    model, processor = tiny
    chat = _chat(3)
    kw: dict[str, Any] = {"model": "tiny", "messages": to_openai_messages(chat), "max_tokens": 8, "temperature": 0,
                          "extra_body": {"repetition_penalty": penalty}}
    reply = client.chat.completions.create(**kw, logprobs=True, top_logprobs=5)
    [choice] = reply.choices
    content = choice.logprobs.content  # type: ignore[union-attr]
    assert content is not None and reply.usage is not None and len(content) == reply.usage.completion_tokens
    texts = TokenTexts(processor.tokenizer)
    prompt = _encode(processor, chat)
    generated: list[int] = []
    overruled = 0
    for entry in content:
        logits = _next_logits(model, prompt, generated)
        logp = torch.log_softmax(logits, dim=-1)
        seen = torch.cat([prompt["input_ids"], torch.tensor([generated], dtype=torch.long)], dim=1)
        token = int(RepetitionPenaltyLogitsProcessor(penalty)(seen, logits[None].clone()).argmax())
        overruled += token != int(logp.argmax())
        assert tuple(entry.bytes or ()) == texts.describe(token)[1] and entry.token == texts.describe(token)[0]
        assert abs(entry.logprob - float(logp[token])) < TOL
        values, ids = logp.topk(5)
        assert [tuple(t.bytes or ()) for t in entry.top_logprobs] == [texts.describe(int(i))[1] for i in ids]
        assert max(abs(t.logprob - float(v)) for t, v in zip(entry.top_logprobs, values)) < TOL
        generated.append(token)
    assert (overruled > 0) == (penalty != 1.0)  # the penalty did change some picks: the case is not vacuous
    assert processor.tokenizer.decode(generated, skip_special_tokens=True) == choice.message.content
    assert choice.message.content == generate(model, processor, [chat], 8, 0.0, penalty)[0]
    without = client.chat.completions.create(**kw)
    assert without.choices[0].logprobs is None and without.choices[0].message.content == choice.message.content
    zero = client.chat.completions.create(**{**kw, "max_tokens": 2}, logprobs=True)
    assert zero.choices[0].logprobs is not None and zero.choices[0].logprobs.content
    assert all(e.top_logprobs == [] for e in zero.choices[0].logprobs.content)


def test_sampled_logprobs_are_those_of_the_sampling_distribution(tiny, client) -> None:  # type: ignore[no-untyped-def]
    model, processor = tiny
    messages = [{"role": "user", "content": "tap the search field"}]
    # the random-init tiny model is nearly flat over 640 tokens: top_p 0.03 keeps about ten of them
    kw: dict[str, Any] = {"model": "tiny", "messages": messages, "max_tokens": 10, "temperature": 0.7, "top_p": 0.03,
                          "seed": 12, "extra_body": {"repetition_penalty": 1.1}}
    reply = client.chat.completions.create(**kw, logprobs=True, top_logprobs=20)
    plain = client.chat.completions.create(**kw)
    assert reply.choices[0].message.content == plain.choices[0].message.content  # the tap does not change sampling
    by_bytes = _ids_by_bytes(processor)
    prompt = _encode(processor, messages)
    chain = [RepetitionPenaltyLogitsProcessor(1.1), TemperatureLogitsWarper(0.7), TopPLogitsWarper(0.03)]
    generated: list[int] = []
    cut_off = 0
    for entry in reply.choices[0].logprobs.content:  # type: ignore[union-attr]
        seen = torch.cat([prompt["input_ids"], torch.tensor([generated], dtype=torch.long)], dim=1)
        scores = _next_logits(model, prompt, generated)[None]
        for proc in chain:
            scores = proc(seen, scores)
        logp = torch.log_softmax(scores, dim=-1)[0]
        token = by_bytes[tuple(entry.bytes or ())]
        assert abs(entry.logprob - float(logp[token])) < TOL and entry.logprob > -9999.0
        assert len(entry.top_logprobs) == 20
        cut_off += sum(t.logprob == -9999.0 for t in entry.top_logprobs)  # outside the top-p nucleus
        assert all(t.logprob == -9999.0 or abs(t.logprob - float(logp[by_bytes[tuple(t.bytes or ())]])) < TOL
                   for t in entry.top_logprobs)
        generated.append(token)
    assert cut_off > 0  # top-p removed some of the 20 best: the reported distribution is the cut one


@pytest.mark.parametrize(("extra", "param", "words"), [
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "between 0 and 20"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs", "between 0 and 20"),
    ({"top_logprobs": 3}, "top_logprobs", "requires logprobs"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed when stream is true"),
    ({"stream": True, "stream_options": {"chunk_size": 2}}, "stream_options.chunk_size", "unknown option"),
    ({"n": 5}, "n", "between 1 and 4"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "not supported"),
])
def test_bad_requests_are_400_with_a_clear_message(client: openai.OpenAI, extra: dict[str, Any], param: str,
                                                   words: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       **extra)
    assert err.value.status_code == 400 and err.value.param == param
    assert words in err.value.message and param in err.value.message


def test_bad_type_logprobs_and_unknown_model(client, served) -> None:  # type: ignore[no-untyped-def]
    url = served.base_url + "/chat/completions"
    base = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for patch, param in (({"logprobs": "yes"}, "logprobs"), ({"logprobs": True, "top_logprobs": "3"}, "top_logprobs"),
                         ({"stream": 1}, "stream")):
        resp = requests.post(url, json={**base, **patch}, timeout=30)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.text
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-9", messages=base["messages"], max_tokens=2)
