"""The TrainJob launcher (venus_core.io.trainjob) and the training launch choice (runtime.launch).

The Kubernetes API is kmock's `KubernetesEmulator` on loopback (tests/kube_fake_api.py): a FAKE API
server (no kube-apiserver can run here) that stores objects behind the real REST paths, driven by
the official client. It has NO controllers: nothing runs a TrainJob. The tests play the Kubeflow
Trainer controller themselves by PATCHing the TrainJob's status (`Complete` / `Failed` conditions)
through the API, and play the trainer pods by writing the job's outputs on the shared "PVC" (a
temporary directory).
"""

from __future__ import annotations

import _thread
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_fake_api import FakeKubeAPI
from kubernetes import client

from venus_core.config import load_spec
from venus_core.config.platform import ResourceSpec
from venus_core.io.trainjob import (GROUP, PLURAL, VERSION, TrainJobFailed, TrainJobLauncher, TrainJobTimeout,
                                    terminal_condition, trainjob_manifest)
from venus_core.runtime import launch

NS = "venus"
SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


@pytest.fixture(scope="module")
def kube() -> Iterator[FakeKubeAPI]:
    fake = FakeKubeAPI(f"{GROUP}/{VERSION}/{PLURAL}")
    yield fake
    fake.stop()


@pytest.fixture
def api(kube: FakeKubeAPI) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube.api_client())


def _names(api: client.CustomObjectsApi) -> list[str]:
    return sorted(o["metadata"]["name"] for o in api.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"])


def _set_condition(api: client.CustomObjectsApi, name: str, kind: str, message: str = "", reason: str = "") -> None:
    api.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, name, {"status": {"conditions": [
        {"type": "Created", "status": "True", "reason": "JobSetCreated", "message": "jobset created"},
        {"type": kind, "status": "True", "reason": reason or kind, "message": message}]}})


class Controller(threading.Thread):
    """Stand-in for the Trainer controller: when a TrainJob appears, `act(api, obj)` after `delay` s."""

    def __init__(self, api: client.CustomObjectsApi, act: Callable[[client.CustomObjectsApi, dict[str, Any]], None],
                 delay: float = 0.3) -> None:
        super().__init__(daemon=True)
        self.api, self.act, self.delay = api, act, delay
        self.seen: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.poll_errors: list[str] = []  # polls that failed and were retried (reported when a test fails)

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    items = self.api.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                                                   _request_timeout=10)["items"]
                except Exception as exc:  # noqa: BLE001 - a slow or refused poll of the loaded fake API: poll again
                    self.poll_errors.append(repr(exc))
                    time.sleep(0.2)
                    continue
                if items:
                    self.seen.append(items[0])
                    time.sleep(self.delay)
                    self.act(self.api, items[0])
                    return
                time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def _body(name: str) -> dict[str, Any]:
    res = ResourceSpec(cpu="64", memory="900Gi", gpu_type="H100", gpu_count=8)
    return trainjob_manifest(name, NS, "venus/train-gpu:0.1.0", "venus_core.runtime.mid_train", ["--out=/x"],
                             nodes=4, procs_per_node=8, runtime="venus-deepspeed", resources=res,
                             env={"KFP_RUN_ID": "r1"})


def test_manifest_follows_the_trainer_v1alpha1_shape() -> None:
    body = _body("venus-mid-train-1")
    assert body["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and body["kind"] == "TrainJob"
    assert body["spec"]["runtimeRef"] == {"apiGroup": GROUP, "kind": "TrainingRuntime", "name": "venus-deepspeed"}
    tr = body["spec"]["trainer"]
    assert tr["command"] == ["torchrun", "-m", "venus_core.runtime.mid_train"] and tr["args"] == ["--out=/x"]
    assert (tr["numNodes"], tr["numProcPerNode"]) == (4, 8)
    assert tr["resourcesPerNode"]["limits"] == {"cpu": "64", "memory": "900Gi", "nvidia.com/gpu": "8"}
    assert tr["env"] == [{"name": "KFP_RUN_ID", "value": "r1"}]
    with pytest.raises(ValueError, match="nodes"):
        trainjob_manifest("x", NS, "i", "m", [], nodes=0, procs_per_node=1, runtime="r", resources=ResourceSpec())
    assert terminal_condition({"status": {"conditions": [{"type": "Complete", "status": "False"}]}}) is None


def test_completed_job_returns_and_is_deleted(api: client.CustomObjectsApi) -> None:
    ctl = Controller(api, lambda a, o: _set_condition(a, o["metadata"]["name"], "Complete", "jobset completed"))
    ctl.start()
    result = TrainJobLauncher(api, NS, watch_s=2).run(_body("tj-complete"), timeout_s=30)
    ctl.join(5)
    assert ctl.error is None and ctl.seen[0]["spec"]["trainer"]["numNodes"] == 4  # what was submitted
    assert result.name == "tj-complete" and [c["type"] for c in result.conditions] == ["Created", "Complete"]
    assert _names(api) == []  # cleaned up


def test_failure_is_raised_with_the_condition_message_and_cleaned_up(api: client.CustomObjectsApi) -> None:
    ctl = Controller(api, lambda a, o: _set_condition(a, o["metadata"]["name"], "Failed",
                                                      "trainer-node-0-1 OOMKilled (exit 137)", "JobSetFailed"))
    ctl.start()
    t0 = time.monotonic()
    with pytest.raises(TrainJobFailed, match=r"tj-failed failed: JobSetFailed: trainer-node-0-1 OOMKilled"):
        TrainJobLauncher(api, NS, watch_s=30).run(_body("tj-failed"), timeout_s=300)
    assert time.monotonic() - t0 < 15  # fails fast, not at the timeout
    assert _names(api) == []


def test_timeout_and_interrupt_delete_the_job(api: client.CustomObjectsApi) -> None:
    with pytest.raises(TrainJobTimeout, match="did not finish within 1 s"):
        TrainJobLauncher(api, NS, watch_s=0.5).run(_body("tj-slow"), timeout_s=1)
    assert _names(api) == []
    # Ctrl-C while watching. `interrupt_main` does nothing where SIGINT is ignored, and a process
    # started in the background by a non-interactive shell (`nohup ./dev test &`) inherits SIGINT
    # ignored: the test installs Python's own handler, as a terminal's Ctrl-C would find it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ctl = Controller(api, lambda a, o: _thread.interrupt_main())
    ctl.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            TrainJobLauncher(api, NS, watch_s=0.5).run(_body("tj-interrupted"), timeout_s=120)
    finally:
        signal.signal(signal.SIGINT, previous)
        ctl.join(5)
        assert ctl.error is None, (ctl.error, ctl.poll_errors)
    assert ctl.seen and _names(api) == [], ctl.poll_errors


def _kubeconfig(path: Path, url: str) -> Path:
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{url}"}}}}]
users: [{{name: u, user: {{token: fake}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: u, namespace: {NS}}}}}]
current-context: fake
""")
    return path


def _complete(a: client.CustomObjectsApi, obj: dict[str, Any], produced: Path, weights: bytes, report: str) -> None:
    """The trainer pods' outputs on the PVC, then the controller's Complete condition."""
    (produced / "model").mkdir(parents=True)
    (produced / "model" / "model.safetensors").write_bytes(weights)
    (produced / "report.json").write_text(report)
    _set_condition(a, obj["metadata"]["name"], "Complete")


def _launch_with(api: client.CustomObjectsApi, trainer: Callable[[client.CustomObjectsApi, dict[str, Any]], None],
                 argv: list[str]) -> dict[str, Any]:
    """`launch.main(argv)` with `trainer` playing the pods and the controller; the submitted TrainJob."""
    ctl = Controller(api, trainer)
    ctl.start()
    assert launch.main(argv) == 0
    ctl.join(5)
    assert ctl.error is None
    return ctl.seen[0]


def test_launch_runs_mid_train_as_a_trainjob_through_the_pvc(kube: FakeKubeAPI, api: client.CustomObjectsApi,
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pvc = tmp_path / "pvc"
    monkeypatch.setattr(launch, "CHECKPOINTS_MOUNT", pvc)
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", kube.url)))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KFP_RUN_ID", "run-7")
    data = tmp_path / "artifact" / "train"
    data.mkdir(parents=True)
    (data / "manifest.json").write_text("{}")
    out = tmp_path / "kfp-output"
    sets = ["mid_train.distributed.launcher=trainjob", "mid_train.distributed.nodes=2",
            "mid_train.distributed.procs_per_node=4", "mid_train.distributed.backend=deepspeed",
            "platform.checkpoints_pvc=venus-checkpoints"]
    argv = ["mid_train", "--spec", str(SPEC), "--out", str(out), "--data", str(data),
            *[a for s in sets for a in ("--set", s)]]

    def trainer(a: client.CustomObjectsApi, obj: dict[str, Any]) -> None:  # the pods' work, then the controller's
        args = obj["spec"]["trainer"]["args"]
        produced = Path(next(x for x in args[args.index("--out") + 1:][:1]))
        assert (Path(args[args.index("--data") + 1]) / "manifest.json").is_file()  # staged on the PVC
        _complete(a, obj, produced, b"weights", '{"steps": 3}')

    job = _launch_with(api, trainer, argv)
    tr = job["spec"]["trainer"]
    assert (tr["numNodes"], tr["numProcPerNode"]) == (2, 4)
    assert job["spec"]["runtimeRef"]["name"] == "venus-deepspeed" and job["metadata"]["namespace"] == NS
    assert {"name": "KFP_RUN_ID", "value": "run-7"} in tr["env"]
    stage = pvc / "run-7" / "mid_train"
    assert tr["args"][tr["args"].index("--checkpoints") + 1] == str(stage / "checkpoints")  # resumable on the PVC
    assert (out / "model" / "model.safetensors").read_bytes() == b"weights" and (out / "report.json").is_file()
    assert _names(api) == []

    fail = Controller(api, lambda a, o: _set_condition(a, o["metadata"]["name"], "Failed", "NCCL timeout"))
    fail.start()
    assert launch.main(argv) == 1
    fail.join(5)
    assert _names(api) == []

    spec = load_spec(SPEC, ["mid_train.distributed.nodes=2"])
    with pytest.raises(ValueError, match="launcher=trainjob for multi-node"):
        launch.run_in_pod("mid_train", [], spec.mid_train.distributed)
    with pytest.raises(ValueError, match="needs platform.checkpoints_pvc"):
        launch.run_trainjob("mid_train", argv[1:], spec, spec.mid_train.distributed, "mid_train")


SPEC_8B = Path(__file__).resolve().parents[2] / "agents" / "ui-venus-1.5-8b"


def test_launch_runs_offline_rl_of_the_8b_spec_as_a_trainjob(kube: FakeKubeAPI, api: client.CustomObjectsApi,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 8B spec with `offline_rl.distributed` on a TrainJob (FSDP2 over 2 nodes x 8 GPUs): the
    job's model, data root and eval data are staged on the PVC and the args point there."""
    pvc = tmp_path / "pvc"
    monkeypatch.setattr(launch, "CHECKPOINTS_MOUNT", pvc)
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", kube.url)))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KFP_RUN_ID", "run-8")
    inputs = {}
    for name in ("model", "score", "held"):
        d = tmp_path / "artifact" / name
        d.mkdir(parents=True)
        (d / "marker.txt").write_text(name)
        inputs[name] = d
    out = tmp_path / "kfp-output"
    sets = ["offline_rl.distributed.launcher=trainjob", "offline_rl.distributed.nodes=2",
            "offline_rl.distributed.procs_per_node=8", "offline_rl.distributed.backend=fsdp2"]
    argv = ["offline_rl", "--spec", str(SPEC_8B), "--domain", "mobile", "--model", str(inputs["model"]),
            "--data-root", str(inputs["score"]), "--eval-data", str(inputs["held"]), "--out", str(out),
            *[a for s in sets for a in ("--set", s)]]
    stage = pvc / "run-8" / "offline_rl-mobile"

    def trainer(a: client.CustomObjectsApi, obj: dict[str, Any]) -> None:
        args = obj["spec"]["trainer"]["args"]
        for flag, name in (("--model", "model"), ("--data-root", "score"), ("--eval-data", "held")):
            staged = Path(args[args.index(flag) + 1])
            assert staged.parent == stage / "inputs" and (staged / "marker.txt").read_text() == name
        produced = Path(args[args.index("--out") + 1])
        _complete(a, obj, produced, b"specialist", '{"domain": "mobile"}')

    job = _launch_with(api, trainer, argv)
    tr = job["spec"]["trainer"]
    assert tr["command"] == ["torchrun", "-m", "venus_core.runtime.offline_rl"]
    assert (tr["numNodes"], tr["numProcPerNode"]) == (2, 8)
    assert job["spec"]["runtimeRef"]["name"] == "venus-torch-distributed"  # FSDP2 is plain torch
    assert tr["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "8"  # platform.resources.offline_rl
    assert tr["args"][tr["args"].index("--domain") + 1] == "mobile"
    assert tr["args"][tr["args"].index("--checkpoints") + 1] == str(stage / "checkpoints")
    assert job["metadata"]["labels"]["venus.dev/job"] == "offline_rl"
    assert (out / "model" / "model.safetensors").read_bytes() == b"specialist"
    assert _names(api) == []

    spec = load_spec(SPEC_8B, ["offline_rl.distributed.nodes=2"])
    assert launch.distributed_of(spec, "offline_rl") is spec.offline_rl.distributed
    assert launch.distributed_of(spec, "online_rl") is None
    with pytest.raises(ValueError, match="launcher=trainjob for multi-node"):
        launch.run_in_pod("offline_rl", [], spec.offline_rl.distributed)
