"""`venus serve`'s dev-mode routes (POST /collective_rpc, POST /reset_prefix_cache) and the
`load_weights` adapter behind them: request checking, vLLM's extension rules, all-or-nothing copies.

Why: these routes stand in for vLLM's in the tests of the online-RL weight sync, so they must be as
strict as a client could need (a request vLLM would refuse is refused) and must never leave the
served model half-copied. The end-to-end path (ServerPolicy kind="vllm" + VenusWorkerExtension) is
in tests/rl/test_online_policy_http.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import torch

from venus_core.models.serve_rpc import LoadWeightsAdapter, dev_mode_from_env, load_extension, make_worker
from venus_core.models.serve_weights import WeightsError
from venus_core.models.server import BackgroundServer, create_app


class Probe:
    """A worker extension for the tests: echoes, sleeps, fails, and reports the thread it ran on."""

    def probe_echo(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"args": list(args), "kwargs": kwargs, "thread": threading.current_thread().name}

    def probe_number(self) -> int:
        return 7

    def probe_sleep(self, seconds: str) -> None:
        time.sleep(float(seconds))

    def probe_fail(self) -> None:
        raise RuntimeError("boom")


def _run(chats: list[Any], sampling: Any) -> list[Any]:
    return []


@pytest.fixture(scope="module")
def dev(tiny: Any) -> Iterator[BackgroundServer]:
    model, _ = tiny
    with BackgroundServer(create_app(_run, "tiny", worker=make_worker(model, Probe))) as srv:
        yield srv


def _post(srv: BackgroundServer, route: str, body: Any) -> requests.Response:
    return requests.post(f"http://{srv.host}:{srv.port}{route}", json=body, timeout=60)


def test_collective_rpc_runs_the_method_on_the_generation_thread(dev: BackgroundServer) -> None:
    reply = _post(dev, "/collective_rpc", {"method": "probe_echo", "args": ["a", "b"], "kwargs": {"k": "v"}})
    assert reply.status_code == 200
    [result] = reply.json()["results"]
    assert result["args"] == ["a", "b"] and result["kwargs"] == {"k": "v"}
    assert result["thread"].startswith("venus-serve-generate")  # between batches, like a weight reload
    assert _post(dev, "/collective_rpc", {"method": "probe_number"}).json() == {"results": ["7"]}  # str(), as vLLM
    assert _post(dev, "/collective_rpc", {"method": "probe_sleep", "args": ["0"]}).json() == {"results": [None]}
    reset = _post(dev, "/reset_prefix_cache", {})
    assert reset.status_code == 200 and reset.content == b""
    health = requests.get(f"http://{dev.host}:{dev.port}/health", timeout=10).json()
    assert health["dev_calls"]["reset_prefix_cache"] >= 1


@pytest.mark.parametrize(("body", "status", "words"), [
    ({}, 400, "method"),
    ({"method": "probe_missing"}, 400, "no method 'probe_missing'"),
    ({"method": "_private"}, 400, "no method '_private'"),
    ({"method": "__init__"}, 400, "no method"),
    ({"method": "probe_echo", "args": "x"}, 400, "args must be a list"),
    ({"method": "probe_echo", "timeout": -1}, 400, "timeout"),
    (["probe_echo"], 400, "JSON object"),
    ({"method": "probe_fail"}, 500, "RuntimeError: boom"),
    ({"method": "probe_sleep", "args": ["2"], "timeout": 0.2}, 500, "timed out after 0.2 s"),
])
def test_bad_calls_are_refused_with_the_reason(dev: BackgroundServer, body: Any, status: int, words: str) -> None:
    reply = _post(dev, "/collective_rpc", body)
    assert reply.status_code == status and words in reply.json()["error"]["message"], reply.text


def test_the_routes_exist_only_in_dev_mode(tiny: Any) -> None:
    with BackgroundServer(create_app(_run, "tiny")) as srv:
        assert _post(srv, "/collective_rpc", {"method": "probe_echo"}).status_code == 404
        assert _post(srv, "/reset_prefix_cache", {}).status_code == 404
        assert "dev_calls" not in requests.get(f"http://{srv.host}:{srv.port}/health", timeout=10).json()


def test_dev_mode_env_and_extension_loading(tiny: Any) -> None:
    assert dev_mode_from_env({}) is False and dev_mode_from_env({"VLLM_SERVER_DEV_MODE": "0"}) is False
    assert dev_mode_from_env({"VLLM_SERVER_DEV_MODE": "1"}) is True
    with pytest.raises(ValueError, match="must be an integer"):
        dev_mode_from_env({"VLLM_SERVER_DEV_MODE": "yes"})
    assert load_extension("venus_core.rl.online.vllm_worker.VenusWorkerExtension").__name__ == "VenusWorkerExtension"
    for bad, words in [("NoDots", "qualified"), ("venus_core.nowhere.X", "cannot be imported"),
                       ("venus_core.rl.online.vllm_worker.LOAD_METHOD", "not a class")]:
        with pytest.raises(ValueError, match=words):
            load_extension(bad)

    class Clash:
        def model_runner(self) -> None: ...

    with pytest.raises(ValueError, match=r"redefines worker attribute\(s\) \['model_runner'\]"):
        make_worker(tiny[0], Clash)


def test_the_adapter_copies_all_or_nothing(tiny_dir: Any) -> None:
    from venus_core.config.spec import ModelSpec
    from venus_core.models.loading import load_model

    model, _ = load_model(tiny_dir, ModelSpec())
    adapter = LoadWeightsAdapter(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    new = {k: v + 1 for k, v in before.items()}
    lm = "lm_head.weight"
    for case, weights, words in [
        ("unknown name", {**new, "model.extra": torch.zeros(1)}, "not in the served model"),
        ("shape", {**new, lm: new[lm][:-1]}, "has shape"),
        ("NaN", {**new, lm: torch.full_like(new[lm], float("nan"))}, "non-finite"),
        ("integer", {**new, lm: new[lm].long()}, "torch.int64"),
        ("left out", {k: v for k, v in new.items() if k != lm}, "not in the checkpoint"),
        ("empty", {}, "no tensors"),
    ]:
        with pytest.raises(WeightsError, match=words):
            adapter.load_weights(iter(weights.items()))
        assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items()), case  # nothing copied
    loaded = adapter.load_weights(iter(new.items()))
    assert loaded == {n for n, _ in model.named_parameters()}
    assert all(torch.equal(model.state_dict()[k], v) for k, v in new.items())
