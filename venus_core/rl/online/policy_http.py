"""`ServerPolicy`: the online-RL `Policy` over an OpenAI-compatible server (vLLM on a cluster,
`venus serve` on a laptop or in CI), returning the sampled token ids and their log-probs.

Why: the in-process `ModelPolicy` samples with the learner's own model, which ties rollouts to the
learner's device and speed; a generation server samples far faster and in parallel with learning.
The learner then needs from each answer exactly what `ModelPolicy` gives it: the sampled token ids
(re-tokenising the text would not reproduce the sampled segmentation, so the log-probs would be of
other tokens) and, for the PPO ratio, their log-probs under the sampling distribution.

One chat completion per `StepRequest`, laid out as eval's `OpenAIPredictor` lays out a query (one
user turn: the screenshot as a PNG data URL, then the prompt; `prompts.build_messages` +
`openai_client.chat_body`), with what `rl.rollout.sample_groups` samples with: temperature T (> 0,
the learner's), top_p 1.0, repetition_penalty 1.0 (π_θ softened by T only), n 1, all sent explicitly
with vLLM's top_k -1 and min_p 0 (vLLM fills fields a request leaves out from the checkpoint's
generation_config.json, and Qwen-VL's narrows the sampler), and
- `logprobs: true` + `return_tokens_as_token_ids: true` (vLLM's extension, also in `venus serve`):
  every logprobs entry reads `token_id:<id>`, so the ids come back exactly, without a tokenizer;
- `logit_bias` -100 for the tokens the learner's sampler suppresses (`suppress_token_ids`: the
  vision placeholders; one in an answer breaks the learner's forward pass, and the learner's
  log-probs are renormalised without them: e^-100 is that within float precision);
- a seed per request, distinct and reproducible (`seed`, the call count and the row). Distinct
  because the G replicas of a task start from the same screenshot: vLLM seeds a generator per
  request, so one seed for all would give them identical answers. (`venus serve` batches only
  requests with equal settings, so seeded requests run one by one there; `seed=None` sends none.)

The end token. `sample_groups` keeps the first end token (`<|im_end|>` or an eos id) in the
completion ids (its mask counts it), so the learner also scores the decision to stop. `venus serve`
returns it as the last logprobs entry (text "", with its log-prob), and so does vLLM V1: its
detokenizer leaves a stop token out of the text only and appends its id back to the output ids,
and logprobs are reported one per output id. For a server that stops on an end token without
reporting it (finish_reason "stop" and the last id not an end id; no stop strings are sent, so
"stop" can only mean an end token) the id is appended: vLLM's `stop_reason` when it is a token id,
else the first of `end_token_ids` (`<|im_end|>`, the chat template's end of turn). Its log-prob was
not reported, so that answer's `logprobs` is None (the learner then scores it itself) rather than
a made-up number. With these ids, `tokenizer.decode(ids, skip_special_tokens=True)` is the returned
text, as `sample_groups` decodes its own. An end id before the last position means the server
stops on other ids than the learner does: an error, not a silent truncation.

Log-probs are the server's, of each sampled token under the distribution it sampled from: in
`venus serve`, log_softmax((logits + bias) / T), which is the learner's
`sequence_logprobs(temperature=T)` (tests/rl/test_online_policy_http.py measures the gap). vLLM V1
reports *raw* log-probs (before temperature) unless started with `--logprobs-mode
processed_logprobs`, which T != 1 needs for these to be behaviour log-probs.

`version` is the server's weights version: `load_weights(path)` asks the server to load a
checkpoint directory on its filesystem and takes the version it answers. How depends on `kind`:
- `venus` (`venus serve --allow-load-weights`): POST {base_url}/load_weights `{"path"}` ->
  `{"loaded": path, "version"}` (`models.serve_weights`);
- `vllm` (vLLM with `VLLM_SERVER_DEV_MODE=1` and `--worker-extension-cls
  venus_core.rl.online.vllm_worker.VenusWorkerExtension`; also `venus serve --dev-mode` with that
  flag): POST {root}/collective_rpc `{"method": "venus_load_weights", "args": [path]}` -> one result
  per worker, each `{"path", "loaded", "version", "digest"}` or `{"error", "unchanged"}`, then POST
  {root}/reset_prefix_cache (cached KV blocks hold the old weights' keys and values). `root` is the
  server root: `base_url` without its `/v1`.
Every HTTP call has a timeout (`timeout`; `load_timeout` for reloads); connection errors, timeouts,
429 and 5xx are retried (`retries`), anything else fails at once. A request that fails, or a reply
that is not what was asked for, raises `PolicyServerError` naming the episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from venus_core.models.openai_client import ChatClient, ChatError, chat_body
from venus_core.models.prompts import build_messages
from venus_core.rl.online.rollout import Completion, StepRequest

TOKEN_ID_PREFIX = "token_id:"
BAN_BIAS = -100.0  # the OpenAI logit_bias value that bans a token
_SEED_MOD = 2**63
ServerKind = Literal["venus", "vllm"]
SERVER_KINDS: tuple[str, ...] = ("venus", "vllm")
LOAD_METHOD = "venus_load_weights"  # rl.online.vllm_worker.LOAD_METHOD (not imported: it pulls in torch)
EXTENSION_CLS = "venus_core.rl.online.vllm_worker.VenusWorkerExtension"


class PolicyServerError(RuntimeError):
    """The generation server failed to answer (or answered wrongly); `episode` names the request
    (None for a weight reload), `status` the HTTP status when there was one."""

    def __init__(self, message: str, *, episode: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.episode = episode
        self.status = status


@dataclass(frozen=True)
class Answer:
    """One parsed reply: the text, the sampled ids, their log-probs (None: not all reported)."""

    text: str
    ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None


def learner_token_ids(model: Any, processor: Any) -> dict[str, tuple[int, ...]]:
    """`end_token_ids` (`<|im_end|>` first) and `suppress_token_ids` as the learner's sampler has
    them (`rl.rollout.end_token_ids`, `suppressed_token_ids`): keyword arguments of ServerPolicy."""
    from venus_core.models.batches import END_OF_TURN
    from venus_core.rl.rollout import end_token_ids, suppressed_token_ids

    end = end_token_ids(model, processor)
    eot = int(processor.tokenizer.convert_tokens_to_ids(END_OF_TURN))
    ordered = ([eot] if eot in end else []) + [i for i in end if i != eot]
    return {"end_token_ids": tuple(ordered), "suppress_token_ids": tuple(suppressed_token_ids(processor))}


def token_id(token: Any, where: str) -> int:
    """The id in vLLM's `token_id:<id>` logprobs token; ValueError otherwise."""
    if not isinstance(token, str) or not token.startswith(TOKEN_ID_PREFIX):
        raise ValueError(f"{where}: token {token!r} is not 'token_id:<id>' (return_tokens_as_token_ids ignored?)")
    digits = token[len(TOKEN_ID_PREFIX):]
    if not digits.isdigit():
        raise ValueError(f"{where}: token {token!r} is not 'token_id:<id>'")
    return int(digits)


def parse_answer(payload: Any, end_token_ids: Sequence[int] = ()) -> Answer:
    """A chat-completion reply (n=1, logprobs with token ids) -> text, ids and log-probs; the end
    token appended when the server stopped on it without reporting it (module docstring)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list) or len(payload["choices"]) != 1:
        raise ValueError("reply is not a chat completion with exactly one choice")
    choice = payload["choices"][0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise ValueError("choices[0] has no message")
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise ValueError(f"choices[0].message.content is {type(text).__name__}, not text")
    finish = choice.get("finish_reason")
    if finish not in ("stop", "length"):
        raise ValueError(f"choices[0].finish_reason is {finish!r}, not 'stop' or 'length'")
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content:
        raise ValueError("choices[0].logprobs.content is missing or empty (the server ignored logprobs?)")
    ids: list[int] = []
    values: list[float] = []
    for t, entry in enumerate(content):
        where = f"logprobs.content[{t}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} is not an object")
        ids.append(token_id(entry.get("token"), where))
        lp = entry.get("logprob")
        if isinstance(lp, bool) or not isinstance(lp, (int, float)):
            raise ValueError(f"{where}.logprob is {lp!r}, not a number")
        values.append(float(lp))
    ends = set(int(e) for e in end_token_ids)
    early = [t for t, i in enumerate(ids[:-1]) if i in ends]
    if early:
        raise ValueError(f"end token {ids[early[0]]} at position {early[0]} of {len(ids)}: the server does not "
                         "stop on the learner's end tokens")
    if finish == "stop" and ends and ids[-1] not in ends:
        reason = choice.get("stop_reason")
        if isinstance(reason, str):
            raise ValueError(f"the server stopped on the stop string {reason!r}; none was sent")
        end = reason if isinstance(reason, int) and not isinstance(reason, bool) else int(end_token_ids[0])
        return Answer(text, (*ids, end), None)  # the end token's log-prob was not reported
    return Answer(text, tuple(ids), tuple(values))


class ServerPolicy:
    """π_θ sampled by an OpenAI-compatible server at `temperature` (the learner's), one request per
    live episode; answers carry the sampled ids and their log-probs (module docstring)."""

    def __init__(self, base_url: str, model: str, *, temperature: float, max_new_tokens: int,
                 seed: int | None = 0, timeout: float = 120.0, concurrency: int = 8, name: str = "server",
                 end_token_ids: Sequence[int] = (), suppress_token_ids: Sequence[int] = (),
                 retries: int = 2, load_timeout: float = 600.0, api_key: str | None = None,
                 kind: ServerKind = "venus") -> None:
        if kind not in SERVER_KINDS:
            raise ValueError(f"kind must be one of {', '.join(SERVER_KINDS)}, got {kind!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0 (the learner's sampling temperature), got {temperature}")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        if not timeout > 0 or not load_timeout > 0:
            raise ValueError(f"timeout and load_timeout must be > 0, got {timeout}, {load_timeout}")
        self.client = ChatClient(base_url, model, api_key=api_key, concurrency=concurrency, timeout_s=timeout,
                                 max_retries=retries, retry_malformed=False)
        self.kind = kind
        self.admin: ChatClient | None = None  # the server root's routes (kind vllm)
        if kind == "vllm":
            root = self.client.base_url
            if not root.endswith("/v1"):
                raise ValueError(f"kind vllm: base_url must be the OpenAI API root ending in /v1 (the weight "
                                 f"routes are at the server root beside it), got {base_url!r}")
            self.admin = ChatClient(root.removesuffix("/v1"), model, api_key=api_key, concurrency=1,
                                    timeout_s=load_timeout, max_retries=0, retry_malformed=False)
        self.model = model
        self.temperature = float(temperature)
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.timeout = timeout
        self.load_timeout = load_timeout
        self.name = name
        self.end_token_ids = tuple(int(i) for i in end_token_ids)
        self.bias = {str(int(i)): BAN_BIAS for i in suppress_token_ids}
        self.version = 0
        self.calls = 0
        self.appended_end = 0  # answers whose end token the server did not report (see the docstring)

    def body(self, request: StepRequest, seed: int | None) -> dict[str, Any]:
        """The chat-completions body of one step."""
        body = chat_body(self.model, build_messages(request.image, request.prompt), self.max_new_tokens,
                         temperature=self.temperature, repetition_penalty=1.0, seed=seed)
        body.update({"top_p": 1.0, "top_k": -1, "min_p": 0.0, "logprobs": True, "return_tokens_as_token_ids": True})
        if self.bias:
            body["logit_bias"] = dict(self.bias)
        return body

    def _seed(self, row: int) -> int | None:
        if self.seed is None:
            return None
        return ((self.seed * 1_000_003 + self.calls) * 1_000_033 + row) % _SEED_MOD

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]:
        if not requests:
            return []
        jobs = [(r, self.body(r, self._seed(i))) for i, r in enumerate(requests)]
        self.calls += 1

        def one(job: tuple[StepRequest, dict[str, Any]]) -> Answer:
            req, body = job
            label = f"episode {req.episode}"
            try:
                payload = self.client.request_json(body, label=label)
            except ChatError as exc:
                raise PolicyServerError(f"{self.name}: {exc}", episode=req.episode, status=exc.status) from None
            try:
                return parse_answer(payload, self.end_token_ids)
            except ValueError as exc:
                raise PolicyServerError(f"{self.name}: {self.client.url}: {label}: {exc}",
                                        episode=req.episode) from None

        answers = self.client.map(one, jobs)
        self.appended_end += sum(a.logprobs is None for a in answers)
        return [Completion(a.text, a.ids, a.logprobs) for a in answers]

    def load_weights(self, path: str | Path) -> int:
        """Have the server load the checkpoint at `path` (a directory on the server's filesystem);
        sets and returns the server's new weights version. PolicyServerError naming the server, the
        route and the status otherwise (module docstring)."""
        version = self._load_vllm(str(path)) if self.kind == "vllm" else self._load_venus(str(path))
        self.version = version
        return version

    def _load_venus(self, path: str) -> int:
        label = f"load_weights {path!r}"
        try:
            reply = self.client.post_json({"path": path}, label, path="/load_weights", timeout_s=self.load_timeout)
        except ChatError as exc:
            hint = " (a venus serve started without --allow-load-weights?)" if exc.status == 404 else ""
            raise PolicyServerError(f"{self.name}: {exc}{hint}", status=exc.status) from None
        version = reply.get("version") if isinstance(reply, dict) else None
        if isinstance(version, bool) or not isinstance(version, int) or reply.get("loaded") != path:
            raise PolicyServerError(f"{self.name}: {self.client.base_url}/load_weights: {label}: unexpected "
                                    f"reply {str(reply)[:200]}")
        return version

    def _load_vllm(self, path: str) -> int:
        assert self.admin is not None
        root, label = self.admin.base_url, f"{LOAD_METHOD} {path!r}"
        body = {"method": LOAD_METHOD, "args": [path], "kwargs": {}, "timeout": self.load_timeout}
        try:  # the HTTP wait outlasts the RPC's own timeout, so the server's answer is the one seen
            reply = self.admin.post_json(body, label, path="/collective_rpc", timeout_s=self.load_timeout + 30.0)
        except ChatError as exc:
            hint = ""
            if exc.status == 404:
                hint = " (a vLLM server started without VLLM_SERVER_DEV_MODE=1, or venus serve without --dev-mode?)"
            elif exc.status is not None and exc.status >= 400:
                hint = f" (a server started without --worker-extension-cls {EXTENSION_CLS}?)"
            raise PolicyServerError(f"{self.name}: {exc}{hint}", status=exc.status) from None
        where = f"{self.name}: {root}/collective_rpc: {label}"
        results = reply.get("results") if isinstance(reply, dict) else None
        if not isinstance(results, list) or not results or not all(isinstance(r, dict) for r in results):
            raise PolicyServerError(f"{where}: unexpected reply {str(reply)[:300]} (one result object per worker "
                                    "expected)")
        failed = [r for r in results if "error" in r]
        if failed:
            worst = next((r for r in failed if r.get("unchanged") is not True), failed[0])
            raise PolicyServerError(f"{where}: refused by {len(failed)} of {len(results)} workers: "
                                    f"{str(worst['error'])[:1000]}")
        versions = {r.get("version") for r in results}
        version = versions.pop() if len(versions) == 1 else None
        if (isinstance(version, bool) or not isinstance(version, int) or any(r.get("path") != path for r in results)
                or len({r.get("digest") for r in results}) != 1):
            raise PolicyServerError(f"{where}: the workers' replies disagree or are not load results: "
                                    f"{str(results)[:300]}")
        try:
            self.admin.post_json({}, "reset_prefix_cache", path="/reset_prefix_cache", empty_ok=True)
        except ChatError as exc:
            raise PolicyServerError(f"{self.name}: {exc} (the weights are loaded, but cached prefixes of the old "
                                    "weights may be reused)", status=exc.status) from None
        return version


__all__ = ["SERVER_KINDS", "Answer", "PolicyServerError", "ServerKind", "ServerPolicy", "learner_token_ids",
           "parse_answer", "token_id"]
