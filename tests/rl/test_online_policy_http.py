"""`ServerPolicy` against a real `venus serve` on loopback with the tiny model: the rollout/trainer
log-prob reconciliation, the ids `sample_groups` would have produced, weight reloads, failures.

Why against a real server: the point of the policy is that what the learner later scores (token
ids, behaviour log-probs) is exactly what the server sampled, so every check compares the server's
answer with an independent in-process computation on the same weights: ids decoded by the
tokenizer against the returned text, log-probs against `completions_batch` + `sequence_logprobs`
(the learner's own pass), near-greedy ids against `sample_groups`. `MAX_MISMATCH` collects the
largest log-prob gap seen, printed at the end of the module (run with -s to see it).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import torch
from PIL import Image, ImageDraw

from serve_cli import venus_serve
from venus_core.config.spec import ModelSpec
from venus_core.envs.base import Task
from venus_core.models.loading import load_model, save_model
from venus_core.models.prompts import build_messages, navigation_prompt
from venus_core.models.serve_runner import logits_size
from venus_core.models.serve_weights import WeightReloader
from venus_core.models.server import BackgroundServer, create_app, transformers_runner
from venus_core.rl.online.policy_http import PolicyServerError, ServerPolicy, learner_token_ids, parse_answer
from venus_core.rl.online.rollout import StepRequest
from venus_core.rl.rollout import completion_mask, completions_batch, sample_groups, sequence_logprobs

Served = tuple[Any, Any, BackgroundServer]
TOL = 1e-4
MAX_MISMATCH: dict[str, float] = {}


def _screen(i: int) -> Image.Image:
    img = Image.new("RGB", (96, 128), (30 + 40 * i, 120, 200 - 30 * i))
    ImageDraw.Draw(img).rectangle((10 + 5 * i, 20, 60, 50 + 10 * i), fill=(250, 250, 250))
    return img


def _requests(n: int, *, same: int = 2) -> list[StepRequest]:
    """n episodes; the first `same` share screenshot and prompt (replicas of one task at step 0)."""
    out = []
    for i in range(n):
        k = 0 if i < same else i
        task = Task(goal=f"open the settings page number {k}")
        history = [] if k % 2 == 0 else [("I look at the screen", "Click(box=(10,20))")]
        out.append(StepRequest(f"task{k}#{i}", _screen(k), navigation_prompt(task.goal, history, "mobile"), task))
    return out


def _serve(model: Any, processor: Any) -> BackgroundServer:
    app = create_app(transformers_runner(model, processor), "tiny", max_batch=4, batch_wait_ms=2,
                     vocab_size=logits_size(model), weights=WeightReloader(model))
    return BackgroundServer(app)


@pytest.fixture(scope="module")
def served(tiny_dir: Path) -> Iterator[Served]:
    """The server's own copy of the tiny model (reload tests change a served model in place)."""
    model, processor = load_model(tiny_dir, ModelSpec())
    with _serve(model, processor) as srv:
        yield model, processor, srv
    if MAX_MISMATCH:
        print("\nrollout/trainer log-prob mismatch (max |server - learner|): "
              + ", ".join(f"{k}: {v:.2e}" for k, v in sorted(MAX_MISMATCH.items())))


def _health(srv: BackgroundServer) -> dict[str, Any]:
    return dict(requests.get(f"http://{srv.host}:{srv.port}/health", timeout=10).json())


def _policy(srv: BackgroundServer, model: Any, processor: Any, **kw: Any) -> ServerPolicy:
    args: dict[str, Any] = {"temperature": 1.0, "max_new_tokens": 12, "seed": 7, "timeout": 120.0,
                            "concurrency": 4, **learner_token_ids(model, processor)}
    args.update(kw)
    return ServerPolicy(srv.base_url, "tiny", **args)


@torch.no_grad()
def _learner_logprobs(model: Any, processor: Any, reqs: list[StepRequest], ids: list[tuple[int, ...]],
                      temperature: float) -> list[list[float]]:
    batch = completions_batch(processor, [build_messages(r.image, r.prompt) for r in reqs], ids)
    lp, _ = sequence_logprobs(model, batch, temperature=temperature)
    return [lp[i, : len(c)].tolist() for i, c in enumerate(ids)]


@pytest.mark.parametrize(("temperature", "seed"), [(1.0, 7), (0.6, 7), (1.0, None)])
def test_ids_decode_to_the_text_and_logprobs_equal_the_learners(served: Served, temperature: float,
                                                                seed: int | None) -> None:
    """Seeded requests run one by one on venus serve (a seed is part of the batch key); unseeded
    ones share batches, so left padding on the server side is covered too."""
    model, processor, srv = served
    policy = _policy(srv, model, processor, temperature=temperature, seed=seed)
    reqs = _requests(5)
    batches_before = _health(srv)["batch_sizes"]
    answers = policy.act(reqs)
    sizes = {int(k): v - batches_before.get(k, 0) for k, v in _health(srv)["batch_sizes"].items()}
    assert (max(k for k, v in sizes.items() if v) > 1) == (seed is None)
    assert len(answers) == len(reqs) and policy.calls == 1
    tok = processor.tokenizer
    for a in answers:
        assert a.token_ids and a.logprobs is not None and len(a.logprobs) == len(a.token_ids)
        assert tok.decode(list(a.token_ids), skip_special_tokens=True, clean_up_tokenization_spaces=False) == a.text
        assert not set(a.token_ids) & set(learner_token_ids(model, processor)["suppress_token_ids"])
    # the replicas of one task got distinct seeds, hence (at T >= 0.6 over 12 tokens) distinct answers
    assert answers[0].token_ids != answers[1].token_ids
    ours = _learner_logprobs(model, processor, reqs, [a.token_ids or () for a in answers], temperature)
    gap = max(abs(s - t) for a, row in zip(answers, ours, strict=True) for s, t in zip(a.logprobs or (), row))
    key = f"T={temperature}" + (", batched" if seed is None else "")
    MAX_MISMATCH[key] = max(gap, MAX_MISMATCH.get(key, 0.0))
    assert gap < TOL, gap
    # the comparison has teeth: the same ids scored at another temperature are far off
    other = _learner_logprobs(model, processor, reqs[:1], [answers[0].token_ids or ()], temperature * 1.5)[0]
    assert max(abs(s - t) for s, t in zip(answers[0].logprobs or (), other)) > 1e-2


def test_near_greedy_ids_are_those_sample_groups_produces(served: Served) -> None:
    """At T=1e-4 both samplers follow the argmax path: the same ids, the same text, same layout."""
    model, processor, srv = served
    reqs = _requests(3, same=1)
    answers = _policy(srv, model, processor, temperature=1e-4, max_new_tokens=10).act(reqs)
    batch = sample_groups(model, processor, [build_messages(r.image, r.prompt) for r in reqs], 1, 10,
                          temperature=1e-4, seed=0)
    lengths = batch.completion_mask.sum(dim=1).long().tolist()
    for i, a in enumerate(answers):
        assert a.token_ids == tuple(batch.completion_ids[i, : lengths[i]].tolist())
        assert a.text == batch.texts[i]


def test_the_end_token_is_the_last_id_as_the_learner_counts_it(served: Served) -> None:
    """A completion that stops on <|im_end|> carries it as its last id with its log-prob, and
    `completion_mask` (what `sample_groups` applies) counts every id: the layouts agree."""
    model, processor, srv = served
    tokens = learner_token_ids(model, processor)
    eot = tokens["end_token_ids"][0]
    assert eot == processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    policy = _policy(srv, model, processor, max_new_tokens=40)
    policy.bias[str(eot)] = 4.0  # make stopping likely within 40 tokens (test only)
    answers = policy.act(_requests(4, same=0))
    stopped = [a for a in answers if a.token_ids and a.token_ids[-1] == eot]
    assert stopped, [a.token_ids for a in answers]
    for a in stopped:
        ids = torch.tensor([a.token_ids])
        assert completion_mask(ids, tokens["end_token_ids"]).sum().item() == len(a.token_ids)
        assert a.logprobs is not None and len(a.logprobs) == len(a.token_ids)
        assert processor.tokenizer.decode(list(a.token_ids), skip_special_tokens=True) == a.text
    assert policy.appended_end == 0  # venus serve reports the end token itself


def _reply(tokens: list[str], finish: str, **choice: Any) -> dict[str, Any]:
    content = [{"token": t, "logprob": -0.5, "bytes": [], "top_logprobs": []} for t in tokens]
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ab"},
                         "logprobs": {"content": content}, "finish_reason": finish, **choice}]}


def test_parse_answer_appends_an_unreported_end_token_and_refuses_bad_replies() -> None:
    full = parse_answer(_reply(["token_id:5", "token_id:9"], "stop"), (9, 3))
    assert full.ids == (5, 9) and full.logprobs == (-0.5, -0.5)
    cut = parse_answer(_reply(["token_id:5"], "stop"), (9, 3))  # stopped on the end token, not reported
    assert cut.ids == (5, 9) and cut.logprobs is None
    assert parse_answer(_reply(["token_id:5"], "stop", stop_reason=3), (9, 3)).ids == (5, 3)  # vLLM's stop id
    assert parse_answer(_reply(["token_id:5"], "length"), (9, 3)).ids == (5,)
    for bad, why in [(_reply(["5"], "stop"), "token_id"), (_reply(["token_id:9", "token_id:5"], "length"), "end token"),
                     (_reply(["token_id:5"], "stop", stop_reason="</a>"), "stop string"),
                     (_reply(["token_id:5"], "abort"), "finish_reason"), (_reply([], "stop"), "logprobs"),
                     ({"choices": []}, "one choice")]:
        with pytest.raises(ValueError, match=why):
            parse_answer(bad, (9, 3))


def _greedy(srv: BackgroundServer) -> tuple[str, list[float]]:
    req = _requests(1)[0]
    body = {"model": "tiny", "max_tokens": 8, "temperature": 0, "logprobs": True,
            "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": _data_url(req.image)}},
                {"type": "text", "text": req.prompt}]}]}
    reply = requests.post(srv.base_url + "/chat/completions", json=body, timeout=60).json()
    choice = reply["choices"][0]
    return choice["message"]["content"], [e["logprob"] for e in choice["logprobs"]["content"]]


def _data_url(img: Image.Image) -> str:
    from venus_core.models.openai_client import image_data_url

    return image_data_url(img)


def _model_and_perturbed(tiny_dir: Path) -> tuple[Any, Any, Any]:
    """(model, processor, a copy of the model with every weight moved by N(0, 0.05), seed 0)."""
    model, processor = load_model(tiny_dir, ModelSpec())
    other, _ = load_model(tiny_dir, ModelSpec())
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return model, processor, other


def test_load_weights_switches_the_served_model_and_a_bad_path_keeps_it(tiny_dir: Path,
                                                                         tmp_path: Path) -> None:
    model, processor, other = _model_and_perturbed(tiny_dir)
    perturbed = save_model(other, processor, tmp_path / "perturbed")
    with _serve(model, processor) as srv:
        policy = _policy(srv, model, processor)
        before = _greedy(srv)
        assert policy.load_weights(perturbed) == 1 and policy.version == 1
        after = _greedy(srv)
        assert after != before and max(abs(a - b) for a, b in zip(after[1], before[1])) > 1e-3
        # what the server samples now is scored by the perturbed weights, not the old ones
        reqs = _requests(2, same=0)
        answers = policy.act(reqs)
        ids = [a.token_ids or () for a in answers]
        new_lp = _learner_logprobs(other, processor, reqs, ids, 1.0)
        old_lp = _learner_logprobs(model, processor, reqs, ids, 1.0)  # the served object, now reloaded
        gap = max(abs(s - t) for a, row in zip(answers, new_lp, strict=True) for s, t in zip(a.logprobs or (), row))
        MAX_MISMATCH["after reload"] = gap
        assert gap < TOL and old_lp == new_lp
        with pytest.raises(PolicyServerError) as err:
            policy.load_weights(tmp_path / "missing")
        assert err.value.status == 400 and "missing" in str(err.value) and policy.version == 1
        assert _greedy(srv) == after  # still the perturbed weights
        assert policy.load_weights(tiny_dir) == 2 and _greedy(srv) == before
        assert _health(srv)["weights_version"] == 2


def test_a_failed_request_names_the_episode(served: Served) -> None:
    model, processor, srv = served
    wrong = ServerPolicy(srv.base_url, "not-served", temperature=1.0, max_new_tokens=4, seed=1, timeout=30,
                         concurrency=2)
    with pytest.raises(PolicyServerError, match=r"episode task0#0") as err:
        wrong.act(_requests(1))
    assert err.value.episode == "task0#0" and err.value.status == 404
    gone = ServerPolicy("http://127.0.0.1:9/v1", "tiny", temperature=1.0, max_new_tokens=4, seed=1, timeout=2,
                        concurrency=1, retries=0)
    with pytest.raises(PolicyServerError, match="connection error") as err:
        gone.act(_requests(1))
    assert err.value.episode == "task0#0"
    with pytest.raises(ValueError, match="temperature"):
        ServerPolicy(srv.base_url, "tiny", temperature=0.0, max_new_tokens=4, seed=1)


def test_rollouts_on_sim_phones_record_the_servers_ids_and_behaviour_logprobs(served: Served) -> None:
    """Through `collect_groups` on live (in-process) sim phones: every step keeps the server's ids,
    its behaviour log-probs are the server's, and the learner's own scoring of the recorded steps
    (as the decoupled loop does it) gives the same numbers."""
    from venus_core.envs import SimPhoneEnv
    from venus_core.rl.online import sim_phone_tasks
    from venus_core.rl.online.devices import LocalEnvs
    from venus_core.rl.online.rollout import collect_groups

    model, processor, srv = served
    size = (128, 224)
    tasks = sim_phone_tasks([1], range(1), size=size, max_steps=3)
    source = LocalEnvs(lambda: SimPhoneEnv(transport="inprocess", size=size), "mobile")
    policy = _policy(srv, model, processor, max_new_tokens=16)
    try:
        groups, stats = collect_groups(tasks, 2, source, policy, devices=2, call_timeout=60)
    finally:
        source.close()
    steps = [st for g in groups for t in g for st in t.steps]
    assert len(groups[0]) == 2 and steps and stats.policy_steps == len(steps) and not stats.losses
    reqs = [StepRequest("x", st.image, st.prompt, tasks[0].task) for st in steps]
    ours = _learner_logprobs(model, processor, reqs, [st.completion.token_ids or () for st in steps], 1.0)
    gap = 0.0
    for st, row in zip(steps, ours, strict=True):
        assert st.behaviour_logp is not None and st.behaviour_logp == list(st.completion.logprobs or ())
        gap = max(gap, max(abs(a - b) for a, b in zip(st.behaviour_logp, row)))
    MAX_MISMATCH["sim-phone rollout"] = gap
    assert gap < TOL


# ---------------------------------------------------------------------------- kind="vllm"
# The vLLM weight-sync path (POST /collective_rpc -> VenusWorkerExtension.venus_load_weights, then
# POST /reset_prefix_cache) against venus serve's dev-mode routes running the same extension class
# on the tiny model. vLLM itself cannot run here: its model loader is the one piece not exercised.


def _serve_dev(model: Any, processor: Any, extension: Any = "ext") -> BackgroundServer:
    from venus_core.models.serve_rpc import make_worker
    from venus_core.rl.online.vllm_worker import VenusWorkerExtension

    ext = VenusWorkerExtension if extension == "ext" else extension
    app = create_app(transformers_runner(model, processor), "tiny", max_batch=4, batch_wait_ms=2,
                     vocab_size=logits_size(model), worker=make_worker(model, ext))
    return BackgroundServer(app)


def _signed(model: Any, processor: Any, out: Path) -> Path:
    """A checkpoint as `OnlineRL.sync_server` writes it (safetensors, then SHA256SUMS)."""
    from venus_core.models.serve_weights import write_manifest

    path = save_model(model, processor, out)
    write_manifest(path)
    return path


def _rpc(srv: BackgroundServer, method: str, *args: Any) -> Any:
    reply = requests.post(f"http://{srv.host}:{srv.port}/collective_rpc", json={"method": method, "args": list(args)},
                          timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()["results"][0]


def test_vllm_kind_loads_the_learners_weights_and_a_tampered_checkpoint_changes_nothing(
        tiny_dir: Path, tmp_path: Path) -> None:
    model, processor, other = _model_and_perturbed(tiny_dir)
    step1 = _signed(other, processor, tmp_path / "v00001")
    with _serve_dev(model, processor) as srv:
        policy = _policy(srv, model, processor, kind="vllm")
        before = _greedy(srv)
        assert policy.load_weights(step1) == 1 and policy.version == 1
        assert _health(srv)["dev_calls"] == {"collective_rpc": 1, "reset_prefix_cache": 1}
        served = model.state_dict()
        assert all(torch.equal(served[k], v) for k, v in other.state_dict().items())  # exactly the checkpoint's
        after = _greedy(srv)
        assert after != before
        # what the server samples now is scored by the learner's new weights, not the old ones
        reqs = _requests(3, same=0)
        answers = policy.act(reqs)
        ids = [a.token_ids or () for a in answers]
        new_lp = _learner_logprobs(other, processor, reqs, ids, 1.0)
        gap = 0.0
        for a, row in zip(answers, new_lp, strict=True):
            assert a.logprobs is not None and len(a.logprobs) == len(row)
            for s, t in zip(a.logprobs, row):
                gap = max(gap, abs(s - t))
                assert abs(s - t) <= 1e-6 * max(1.0, abs(t)), (s, t)  # float32 resolution of the value
        MAX_MISMATCH["after vllm-kind reload"] = gap
        # a tampered checkpoint: refused with the reason, the served weights and version unchanged
        bad = shutil.copytree(step1, tmp_path / "v00002")
        sums = (bad / "SHA256SUMS").read_text()
        digest = next(line.split()[0] for line in sums.splitlines() if line.endswith("model.safetensors"))
        (bad / "SHA256SUMS").write_text(sums.replace(digest, "f" * 64))
        with pytest.raises(PolicyServerError) as err:
            policy.load_weights(bad)
        message = str(err.value)
        assert message.startswith(f"server: http://{srv.host}:{srv.port}/collective_rpc: venus_load_weights")
        assert "sha256 does not match SHA256SUMS" in message and "unchanged" in message
        assert policy.version == 1 and _greedy(srv) == after
        assert _rpc(srv, "venus_weights_version")["version"] == 1
        assert _health(srv)["dev_calls"] == {"collective_rpc": 3, "reset_prefix_cache": 1}  # no reset after a refusal
        # an unsigned directory (the learner always signs) is refused too; a signed copy of the start loads
        unsigned = shutil.copytree(tiny_dir, tmp_path / "unsigned")
        (unsigned / "SHA256SUMS").unlink()
        with pytest.raises(PolicyServerError, match="no SHA256SUMS"):
            policy.load_weights(unsigned)
        start = _signed(load_model(tiny_dir, ModelSpec())[0], processor, tmp_path / "v00003")
        assert policy.load_weights(start) == 2 and _greedy(srv) == before


def test_vllm_kind_errors_name_the_server_the_route_and_the_status(served: Served, tiny_dir: Path) -> None:
    model, processor, plain = served
    policy = _policy(plain, model, processor, kind="vllm", name="rollout-server")
    with pytest.raises(PolicyServerError) as err:  # a server without dev mode has no such route
        policy.load_weights(tiny_dir)
    assert err.value.status == 404
    assert f"rollout-server: http://{plain.host}:{plain.port}/collective_rpc" in str(err.value)
    assert "HTTP 404" in str(err.value) and "VLLM_SERVER_DEV_MODE=1" in str(err.value)
    with _serve_dev(model, processor, extension=None) as srv:  # dev mode, but no worker extension
        with pytest.raises(PolicyServerError) as err:
            _policy(srv, model, processor, kind="vllm").load_weights(tiny_dir)
        assert err.value.status == 400 and "no method 'venus_load_weights'" in str(err.value)
        assert "--worker-extension-cls venus_core.rl.online.vllm_worker.VenusWorkerExtension" in str(err.value)
    with pytest.raises(ValueError, match="ending in /v1"):
        ServerPolicy(f"http://{plain.host}:{plain.port}", "tiny", temperature=1.0, max_new_tokens=4, kind="vllm")
    with pytest.raises(ValueError, match="kind must be one of"):
        ServerPolicy(plain.base_url, "tiny", temperature=1.0, max_new_tokens=4, kind="sglang")  # type: ignore[arg-type]


@pytest.mark.slow
def test_venus_serve_dev_mode_flags_run_the_extension(tiny_dir: Path, tmp_path: Path) -> None:
    """The CLI: `VLLM_SERVER_DEV_MODE=1 venus serve --worker-extension-cls ...`, as the vLLM Deployment
    is started, answers ServerPolicy(kind="vllm")."""
    with venus_serve(["--model", str(tiny_dir), "--name", "tiny", "--threads", "1",
                      "--worker-extension-cls", "venus_core.rl.online.vllm_worker.VenusWorkerExtension"],
                     {"VLLM_SERVER_DEV_MODE": "1"}) as base_url:
        model, processor = load_model(tiny_dir, ModelSpec())
        policy = ServerPolicy(base_url, "tiny", temperature=1.0, max_new_tokens=4, kind="vllm", timeout=60)
        assert policy.load_weights(_signed(model, processor, tmp_path / "v00001")) == 1
        health = requests.get(base_url.removesuffix("/v1") + "/health", timeout=10).json()
        assert health["dev_calls"] == {"collective_rpc": 1, "reset_prefix_cache": 1}
