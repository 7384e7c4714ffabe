"""`venus serve`'s POST /v1/load_weights: verified checkpoints replace the served weights between
batches; every bad checkpoint is a 400 naming why, and the old weights keep serving.

Why: in online RL a reload that half-applies, or silently applies a broken checkpoint (a partial
copy, a pickle, other shapes, NaNs), poisons every later rollout without an error anywhere. Each
case is a real checkpoint directory on disk, and "the old weights keep serving" is checked by the
served greedy answer, not by the server's say-so.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import torch
from safetensors.torch import load_file, save_file

from models_helpers import screen
from serve_cli import venus_serve
from venus_core.config.spec import ModelSpec
from venus_core.models.generation import generate
from venus_core.models.loading import load_model, save_model
from venus_core.models.openai_client import to_openai_messages
from venus_core.models.prompts import build_messages, grounding_prompt
from venus_core.models.serve_runner import logits_size
from venus_core.models.serve_weights import WeightReloader, write_manifest
from venus_core.models.server import BackgroundServer, create_app, transformers_runner
from venus_core.models.tiny import build_tiny

Served = tuple[Any, Any, BackgroundServer]
CHAT = build_messages(screen((200, 80, 40), (96, 128)), grounding_prompt("the orange tab"))


@pytest.fixture()
def served(tiny_dir: Path) -> Iterator[Served]:
    """A server on its own copy of the tiny model (reloads change it in place)."""
    model, processor = load_model(tiny_dir, ModelSpec())
    app = create_app(transformers_runner(model, processor), "tiny", max_batch=4, batch_wait_ms=2,
                     vocab_size=logits_size(model), weights=WeightReloader(model))
    with BackgroundServer(app) as srv:
        yield model, processor, srv


def _greedy(srv: BackgroundServer, max_tokens: int = 10) -> str:
    body = {"model": "tiny", "messages": to_openai_messages(CHAT), "max_tokens": max_tokens, "temperature": 0}
    resp = requests.post(srv.base_url + "/chat/completions", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    return str(resp.json()["choices"][0]["message"]["content"])


def _load(srv: BackgroundServer, body: Any) -> requests.Response:
    return requests.post(srv.base_url + "/load_weights", json=body, timeout=120)


def _version(srv: BackgroundServer) -> int:
    return int(requests.get(f"http://{srv.host}:{srv.port}/health", timeout=10).json()["weights_version"])


def _perturbed(tiny_dir: Path, out: Path, scale: float = 0.05) -> tuple[Path, Any]:
    model, processor = load_model(tiny_dir, ModelSpec())
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return save_model(model, processor, out), model


def _rewrite(src: Path, dst: Path, edit: Any) -> Path:
    """A copy of checkpoint `src` whose tensors went through `edit(dict) -> dict`, its manifest
    re-written (so that the checks after the manifest's are reached)."""
    shutil.copytree(src, dst)
    [file] = sorted(dst.glob("*.safetensors"))
    save_file(edit(load_file(file)), file, metadata={"format": "pt"})
    write_manifest(dst)
    return dst


def test_a_verified_checkpoint_replaces_the_weights(served: Served, tiny_dir: Path,
                                                    tmp_path: Path) -> None:
    _, processor, srv = served
    before = _greedy(srv)
    path, other = _perturbed(tiny_dir, tmp_path / "step-1")
    write_manifest(path)  # a manifest, when present, is checked too
    resp = _load(srv, {"path": str(path)})
    assert resp.status_code == 200 and resp.json() == {"loaded": str(path), "version": 1}
    after = _greedy(srv)
    assert after != before
    assert after == generate(other, processor, [CHAT], 10, 0.0, 1.0)[0]  # exactly the checkpoint's model
    assert _version(srv) == 1
    assert _load(srv, {"path": str(tiny_dir)}).json()["version"] == 2 and _greedy(srv) == before


def _bad_checkpoints(tiny_dir: Path, root: Path) -> list[tuple[str, Path, str]]:
    """(case, directory, words the 400 must contain)."""
    cases: list[tuple[str, Path, str]] = [("missing", root / "nowhere", "not found")]
    empty = root / "no-weights"
    empty.mkdir()
    shutil.copy(tiny_dir / "config.json", empty / "config.json")
    cases.append(("no safetensors", empty, "no *.safetensors"))
    pickled = shutil.copytree(tiny_dir, root / "pickled")
    torch.save({"x": torch.zeros(1)}, pickled / "extra_state.pt")
    cases.append(("pickle", pickled, "pickle"))
    altered = shutil.copytree(tiny_dir, root / "altered")
    write_manifest(altered)
    (altered / "config.json").write_text((altered / "config.json").read_text() + "\n")
    cases.append(("manifest digest", altered, "sha256 does not match"))
    unlisted = shutil.copytree(tiny_dir, root / "unlisted")
    write_manifest(unlisted)
    shutil.copy(unlisted / "model.safetensors", unlisted / "model-extra.safetensors")
    cases.append(("manifest coverage", unlisted, "does not list weight file model-extra.safetensors"))
    wider = build_tiny(ModelSpec().tiny.model_copy(update={"intermediate_size": 192}), root / "wider")
    cases.append(("other shapes", wider, "shape"))
    lm = "lm_head.weight"
    cases.append(("truncated tensor", _rewrite(tiny_dir, root / "truncated", lambda t: {**t, lm: t[lm][:-3]}),
                  lm))
    cases.append(("missing tensor", _rewrite(tiny_dir, root / "dropped", lambda t: {k: v for k, v in t.items()
                                                                                   if k != lm}), lm))

    def poison(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        bad = t[lm].clone()
        bad[0, 0] = float("nan")
        return {**t, lm: bad}

    cases.append(("NaN", _rewrite(tiny_dir, root / "nan", poison), "non-finite"))
    other_type = shutil.copytree(tiny_dir, root / "qwen25")
    cfg = (other_type / "config.json").read_text().replace('"model_type": "qwen3_vl"', '"model_type": "qwen2_5_vl"', 1)
    (other_type / "config.json").write_text(cfg)
    write_manifest(other_type)
    cases.append(("model_type", other_type, "model_type"))
    return cases


def test_bad_checkpoints_are_400_and_the_old_weights_keep_serving(served: Served, tiny_dir: Path,
                                                                  tmp_path: Path) -> None:
    _, _, srv = served
    before = _greedy(srv)
    for case, path, words in _bad_checkpoints(tiny_dir, tmp_path):
        resp = _load(srv, {"path": str(path)})
        assert resp.status_code == 400, (case, resp.text)
        error = resp.json()["error"]
        assert error["param"] == "path" and words in error["message"], (case, error["message"])
        assert "unchanged" in error["message"], case
        assert _greedy(srv) == before, case
    assert _version(srv) == 0


@pytest.mark.parametrize(("body", "param", "words"), [
    ({}, "path", "is required"),
    ({"path": ""}, "path", "is required"),
    ({"path": 5}, "path", "is required"),
    ({"path": "x", "load_format": "auto"}, "load_format", "unknown field"),
    (["x"], None, "JSON object"),
])
def test_bad_load_requests_are_400(served: Served, body: Any, param: str | None, words: str) -> None:
    resp = _load(served[2], body)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == param and words in resp.text
    raw = requests.post(served[2].base_url + "/load_weights", data=b"{not json", timeout=30)
    assert raw.status_code == 400 and "not valid JSON" in raw.text


def test_requests_during_a_reload_see_the_old_or_the_new_weights(served: Served, tiny_dir: Path,
                                                                 tmp_path: Path) -> None:
    _, processor, srv = served
    before = _greedy(srv, 16)
    path, other = _perturbed(tiny_dir, tmp_path / "next")
    new = generate(other, processor, [CHAT], 16, 0.0, 1.0)[0]
    assert new != before
    answers: list[str] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            for _ in range(3):
                answers.append(_greedy(srv, 16))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    assert _load(srv, {"path": str(path)}).status_code == 200
    for t in threads:
        t.join(timeout=300)
    assert not errors and len(answers) == 9
    assert set(answers) <= {before, new}, set(answers) - {before, new}  # never a mix of the two
    assert _greedy(srv, 16) == new


def test_reloading_is_off_unless_enabled(tiny: Any) -> None:
    model, processor = tiny
    with BackgroundServer(create_app(transformers_runner(model, processor), "tiny")) as srv:
        resp = _load(srv, {"path": "/anything"})
        assert resp.status_code == 404 and "--allow-load-weights" in resp.json()["error"]["message"]
        assert requests.get(f"http://{srv.host}:{srv.port}/health", timeout=10).json()["weights_version"] == 0


@pytest.mark.slow
def test_venus_serve_flags_enable_reloads_and_token_ids(tiny_dir: Path) -> None:
    """The CLI wires `--allow-load-weights` and `--return-tokens-as-token-ids` into the app."""
    with venus_serve(["--model", str(tiny_dir), "--name", "tiny", "--threads", "1", "--allow-load-weights",
                      "--return-tokens-as-token-ids"]) as base_url:
        reply = requests.post(base_url + "/load_weights", json={"path": str(tiny_dir)}, timeout=120)
        assert reply.status_code == 200 and reply.json() == {"loaded": str(tiny_dir), "version": 1}
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0,
                "logprobs": True}
        content = requests.post(base_url + "/chat/completions", json=body, timeout=60).json()["choices"][0]["logprobs"]
        assert all(e["token"].startswith("token_id:") for e in content["content"])
