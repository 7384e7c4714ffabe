"""`VenusWorkerExtension` on a fake vLLM worker: what reaches `model_runner.model.load_weights`, and
what never does.

Why a fake: vLLM cannot run here, and the extension's contract with vLLM is narrow (a worker with
`model_runner.model.load_weights(iterable of (HF name, tensor))` and `device`, vLLM's RLHF pattern).
The fake records every tensor it is given, so "a bad checkpoint changes nothing" means the loader
was never called, and "a good one is loaded" means it got every tensor of the files, equal to them,
on the worker's device in the served dtype. The real transformers model behind `venus serve`'s
adapter is covered end to end by tests/rl/test_online_policy_http.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from venus_core.models.serve_weights import manifest_digest, write_manifest
from venus_core.rl.online.vllm_worker import WEIGHTS_ROOT_ENV, VenusWorkerExtension


class FakeModel(torch.nn.Module):
    """vLLM's model interface as the extension uses it; `load_weights` records its input."""

    def __init__(self, names: dict[str, tuple[int, ...]], dtype: torch.dtype = torch.float32,
                 fail_after: int | None = None, report: bool = True, model_type: str = "qwen3_vl") -> None:
        super().__init__()
        self.params = torch.nn.ParameterDict({n.replace(".", "__"): torch.nn.Parameter(torch.zeros(s, dtype=dtype))
                                              for n, s in names.items()})
        self.hf_names = dict(zip((n.replace(".", "__") for n in names), names))
        self.config = type("Config", (), {"model_type": model_type})()
        self.calls = 0
        self.received: dict[str, torch.Tensor] = {}
        self.fail_after, self.report = fail_after, report

    def named_parameters(self, *args: Any, **kwargs: Any) -> Any:  # HF names, as vLLM's own naming stand-in
        return ((self.hf_names[k.removeprefix("params.")], p) for k, p in super().named_parameters())

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str] | None:
        self.calls += 1
        for i, (name, tensor) in enumerate(weights):
            if self.fail_after is not None and i >= self.fail_after:
                raise RuntimeError(f"no parameter for {name}")
            self.received[name] = tensor
        return set(self.received) if self.report else None


class FakeRunner:
    def __init__(self, model: FakeModel) -> None:
        self.model = model


class FakeWorker:
    """The part of vLLM's GPU worker the extension touches."""

    def __init__(self, model: FakeModel) -> None:
        self.model_runner = FakeRunner(model)
        self.device = torch.device("cpu")


def _worker(model: FakeModel) -> Any:
    """The extension mixed in the way vLLM does it: an extra base class of the worker."""
    return type("Worker", (FakeWorker, VenusWorkerExtension), {})(model)


@pytest.fixture()
def checkpoint(tiny_dir: Path, tmp_path: Path) -> Path:
    """A learner checkpoint as `OnlineRL.sync_server` writes it: HF files + SHA256SUMS last."""
    out = shutil.copytree(tiny_dir, tmp_path / "v00001")
    write_manifest(out)
    return out


def _shapes(ckpt: Path) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in load_file(ckpt / "model.safetensors").items()}


def test_a_verified_checkpoint_reaches_load_weights_whole(checkpoint: Path) -> None:
    model = FakeModel(_shapes(checkpoint), dtype=torch.bfloat16)
    worker = _worker(model)
    assert worker.venus_weights_version() == {"version": 0, "path": None, "digest": None, "dirty": False}
    reply = worker.venus_load_weights(str(checkpoint))
    tensors = load_file(checkpoint / "model.safetensors")
    assert "error" not in reply, reply
    assert reply["loaded"] == len(tensors) and reply["version"] == 1 and reply["path"] == str(checkpoint)
    assert reply["digest"] == manifest_digest(checkpoint) and reply["digest"].startswith("sha256:")
    assert model.calls == 1 and set(model.received) == set(tensors)
    for name, t in model.received.items():  # on the worker's device, in the served dtype, equal to the file's
        assert t.device == worker.device and t.dtype == torch.bfloat16
        assert torch.equal(t, tensors[name].to(torch.bfloat16))
    assert worker.venus_weights_version() == {"version": 1, "path": str(checkpoint), "digest": reply["digest"],
                                              "dirty": False}
    assert worker.venus_load_weights(str(checkpoint))["version"] == 2


def _tampered(checkpoint: Path, root: Path) -> list[tuple[str, Path, str]]:
    """(case, directory, words the error must contain): each must be refused before loading."""
    cases = []
    bad_sum = shutil.copytree(checkpoint, root / "bad-sum")
    text = (bad_sum / "SHA256SUMS").read_text()
    digest = next(line.split()[0] for line in text.splitlines() if line.endswith("model.safetensors"))
    (bad_sum / "SHA256SUMS").write_text(text.replace(digest, "0" * 64))
    cases.append(("bad SHA256SUMS", bad_sum, "sha256 does not match"))
    altered = shutil.copytree(checkpoint, root / "altered")
    tensors = load_file(altered / "model.safetensors")
    save_file({k: v + 1 for k, v in tensors.items()}, altered / "model.safetensors", metadata={"format": "pt"})
    cases.append(("weights changed after the manifest", altered, "sha256 does not match"))
    unsigned = shutil.copytree(checkpoint, root / "unsigned")
    (unsigned / "SHA256SUMS").unlink()
    cases.append(("no manifest", unsigned, "no SHA256SUMS"))
    pickled = shutil.copytree(checkpoint, root / "pickled")
    torch.save({"x": torch.zeros(1)}, pickled / "extra.pt")
    write_manifest(pickled)
    cases.append(("pickle", pickled, "pickle"))
    nan = shutil.copytree(checkpoint, root / "nan")
    poisoned = load_file(nan / "model.safetensors")
    poisoned["lm_head.weight"][0, 0] = float("nan")
    save_file(poisoned, nan / "model.safetensors", metadata={"format": "pt"})
    write_manifest(nan)
    cases.append(("NaN", nan, "non-finite"))
    other = shutil.copytree(checkpoint, root / "other-type")
    cfg = (other / "config.json").read_text().replace('"model_type": "qwen3_vl"', '"model_type": "qwen2_5_vl"', 1)
    (other / "config.json").write_text(cfg)
    write_manifest(other)
    cases.append(("another architecture", other, "model_type"))
    cases.append(("missing", root / "nowhere", "not found"))
    return cases


def test_a_tampered_checkpoint_never_reaches_load_weights(checkpoint: Path, tmp_path: Path) -> None:
    model = FakeModel(_shapes(checkpoint))
    worker = _worker(model)
    for case, path, words in _tampered(checkpoint, tmp_path):
        reply = worker.venus_load_weights(str(path))
        assert words in reply.get("error", ""), (case, reply)
        assert reply["unchanged"] is True and "unchanged" in reply["error"] and reply["version"] == 0, case
        assert model.calls == 0 and not model.received, case
    assert worker.venus_weights_version()["version"] == 0


def test_weights_root_confines_the_paths(checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = FakeModel(_shapes(checkpoint))
    worker = _worker(model)
    monkeypatch.setenv(WEIGHTS_ROOT_ENV, str(tmp_path / "elsewhere"))
    reply = worker.venus_load_weights(str(checkpoint))
    assert "outside $VENUS_WEIGHTS_ROOT" in reply["error"] and model.calls == 0
    link = tmp_path / "elsewhere" / "link"
    link.parent.mkdir()
    link.symlink_to(checkpoint)  # a link out of the root does not count as inside it
    assert "outside" in worker.venus_load_weights(str(link))["error"] and model.calls == 0
    monkeypatch.setenv(WEIGHTS_ROOT_ENV, str(tmp_path))
    assert worker.venus_load_weights(str(checkpoint))["version"] == 1


def test_a_load_that_fails_halfway_says_the_weights_may_be_mixed(checkpoint: Path) -> None:
    shapes = _shapes(checkpoint)
    model = FakeModel(shapes, fail_after=5)
    worker = _worker(model)
    reply = worker.venus_load_weights(str(checkpoint))
    assert reply["unchanged"] is False and "partially updated" in reply["error"]
    assert "no parameter for" in reply["error"]
    assert len(model.received) == 5 and worker.venus_weights_version() == {
        "version": 0, "path": None, "digest": None, "dirty": True}
    # a checkpoint that does not cover every parameter of the served model (vLLM's start-up check)
    wider = FakeModel({**shapes, "model.extra.weight": (2, 2)})
    reply = _worker(wider).venus_load_weights(str(checkpoint))
    assert reply["unchanged"] is False and "model.extra.weight" in reply["error"]
    # a loader that does not report the names it loaded is taken at its word
    assert _worker(FakeModel(shapes, report=False)).venus_load_weights(str(checkpoint))["version"] == 1


def test_the_served_architecture_is_checked_when_the_model_names_it(checkpoint: Path) -> None:
    model = FakeModel(_shapes(checkpoint), model_type="qwen2_5_vl")
    reply = _worker(model).venus_load_weights(str(checkpoint))
    assert "model_type" in reply["error"] and model.calls == 0


def test_importing_the_extension_needs_neither_vllm_nor_torch() -> None:
    """vLLM imports it by name in every worker; it must not drag in more than the rollout image has."""
    code = ("import sys, venus_core.rl.online.vllm_worker as w; "
            "assert 'vllm' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)[:5]; "
            "print(w.VenusWorkerExtension.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "VenusWorkerExtension", out.stderr[-2000:]
