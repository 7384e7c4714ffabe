"""Offline validation of manifests/ (kustomize base + overlays `local` and `gpu-cluster`).

No cluster is reachable here, so the overlays are rendered and checked as a cluster would see them:

* Rendering: a small loader applies exactly the kustomize features the manifests use
  (`resources` files and directories, JSON6902 `patches` targeted by kind + name, `images`) and
  refuses any other kustomization field, so CI needs no kustomize binary. Where `kubectl` is
  installed (`kubectl kustomize`, kustomize v5 built in), its output must equal the loader's:
  that test is the only one skipped without kubectl.
* Core kinds are validated with `kubernetes-validate --strict` (unknown fields are errors) against
  Kubernetes 1.30 schemas.
* TrainingRuntime (trainer.kubeflow.org/v1alpha1) is a CRD whose schema is not available offline:
  it is checked structurally (apiVersion, kind, mlPolicy with exactly one of torch / mpi, a
  replicatedJob `node` with the trainer ancestor label and a container `node`), and the JobSet's
  embedded Job templates are validated strictly as batch/v1 Jobs, which covers the pod specs.
* Security: every container (init containers included) has resource limits, is unprivileged
  without privilege escalation and with all capabilities dropped, and runs non-root (container or
  pod securityContext) with readOnlyRootFilesystem, except EXEMPT_NON_ROOT for the last two.
  RBAC verbs, host access, /dev/kvm, network policies and TLS: test_manifests_security.py.

Wiring between the objects and to the agent specs is in test_manifests_wiring.py.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
OVERLAYS = ("local", "gpu-cluster")
K8S_VERSION = "1.30.0"
NAMESPACE = "venus"
CORE_GROUPS = ("v1", "apps/v1", "batch/v1", "rbac.authorization.k8s.io/v1", "networking.k8s.io/v1")
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
# The Android emulator image runs its own user and writes its AVD into the image
# (see manifests/base/device-pool.yaml): not asserted non-root, no read-only root filesystem.
EXEMPT_NON_ROOT = {("StatefulSet", "android-emulator", "emulator")}
SUPPORTED_FIELDS = {"apiVersion", "kind", "resources", "patches", "images"}
Doc = dict[str, Any]


# ---------------------------------------------------------------------------- rendering


def _split_image(ref: str) -> tuple[str, str]:
    """('repo/name', ':tag' or '@sha256:...' or '') for an image reference."""
    if "@" in ref:
        name, digest = ref.split("@", 1)
        return name, "@" + digest
    head, _, last = ref.rpartition("/")
    if ":" in last:
        last, tag = last.split(":", 1)
        return (f"{head}/{last}" if head else last), ":" + tag
    return ref, ""


def _containers(node: Any) -> Iterator[dict[str, Any]]:
    """Every container under `containers` / `initContainers`, at any depth (CRDs included)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from (c for c in value if isinstance(c, dict))
            yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


def _set_images(docs: list[Doc], rules: list[dict[str, str]], where: Path) -> None:
    for rule in rules:
        if "name" not in rule or not set(rule) <= {"name", "newName", "newTag", "digest"}:
            raise ValueError(f"{where}: unsupported images entry {rule}")
        for c in (c for d in docs for c in _containers(d)):
            name, suffix = _split_image(c["image"])
            if name != rule["name"]:
                continue
            if "digest" in rule:
                suffix = "@" + rule["digest"]
            elif "newTag" in rule:
                suffix = ":" + str(rule["newTag"])
            c["image"] = rule.get("newName", name) + suffix


def render(directory: Path) -> list[Doc]:
    """Render a kustomization directory (the subset described in the module docstring)."""
    kfile = directory / "kustomization.yaml"
    spec = yaml.safe_load(kfile.read_text(encoding="utf-8"))
    unknown = set(spec) - SUPPORTED_FIELDS
    if unknown:
        raise ValueError(f"{kfile}: unsupported kustomization field(s) {sorted(unknown)}")
    docs: list[Doc] = []
    for res in spec.get("resources", []):
        path = (directory / res).resolve()
        if path.is_dir():
            docs += render(path)
        elif path.is_file():
            docs += [
                d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None
            ]
        else:
            raise ValueError(f"{kfile}: resource {res} not found")
    for i, patch in enumerate(spec.get("patches", [])):
        target = patch.get("target", {})
        if set(target) != {"kind", "name"} or set(patch) != {"target", "patch"}:
            raise ValueError(
                f"{kfile}: patches[{i}] must be an inline JSON6902 patch with target kind + name"
            )
        hits = [
            j
            for j, d in enumerate(docs)
            if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]
        ]
        if len(hits) != 1:
            raise ValueError(f"{kfile}: patches[{i}] target {target} matches {len(hits)} objects")
        docs[hits[0]] = jsonpatch.apply_patch(docs[hits[0]], yaml.safe_load(patch["patch"]))
    _set_images(docs, spec.get("images", []), kfile)
    return docs


def _key(doc: Doc) -> tuple[str, str, str]:
    return doc["apiVersion"], doc["kind"], doc["metadata"]["name"]


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[Doc]]:
    return request.param, render(MANIFESTS / "overlays" / request.param)


# ---------------------------------------------------------------------------- the loader itself


def test_loader_applies_patches_and_images(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "venus/base:0.1.0"}]},
    }
    (tmp_path / "base" / "pod.yaml").write_text(yaml.safe_dump(pod))
    (tmp_path / "base" / "kustomization.yaml").write_text("resources: [pod.yaml]\n")
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": ["base"],
                "images": [
                    {"name": "venus/base", "newName": "reg/venus/base", "digest": "sha256:ab"}
                ],
                "patches": [
                    {
                        "target": {"kind": "Pod", "name": "p"},
                        "patch": "- {op: add, path: /spec/nodeName, value: n1}",
                    }
                ],
            }
        )
    )
    (out,) = render(tmp_path)
    assert out["spec"]["nodeName"] == "n1"
    assert out["spec"]["containers"][0]["image"] == "reg/venus/base@sha256:ab"
    (tmp_path / "kustomization.yaml").write_text("resources: [base]\nnamespace: other\n")
    with pytest.raises(ValueError, match="unsupported kustomization field"):
        render(tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": ["base"],
                "patches": [{"target": {"kind": "Pod", "name": "nope"}, "patch": "[]"}],
            }
        )
    )
    with pytest.raises(ValueError, match="matches 0 objects"):
        render(tmp_path)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
@pytest.mark.parametrize("name", OVERLAYS)
def test_loader_matches_kubectl_kustomize(name: str) -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(MANIFESTS / "overlays" / name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    theirs = sorted((d for d in yaml.safe_load_all(out) if d), key=_key)
    ours = sorted(render(MANIFESTS / "overlays" / name), key=_key)
    assert [_key(d) for d in ours] == [_key(d) for d in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert a == b, f"{name}: {_key(a)} differs from kubectl kustomize"


# ---------------------------------------------------------------------------- schemas


def _core(doc: Doc) -> bool:
    return doc["apiVersion"] in CORE_GROUPS


def test_every_object_is_core_or_a_trainer_runtime(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    other = [
        _key(d)
        for d in docs
        if not _core(d) and not (d["apiVersion"] == TRAINER_API and d["kind"] == "TrainingRuntime")
    ]
    assert other == [], f"{name}: kinds this test cannot validate: {other}"


def test_core_objects_validate_strict(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    errors = []
    for doc in filter(_core, docs):
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{name}: {_key(doc)}: {e.message}")
    assert errors == []


def test_strict_validation_rejects_unknown_fields() -> None:
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"portz": []}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_trainer_runtimes_structure(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    runtimes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "TrainingRuntime"}
    assert set(runtimes) == {"venus-torch-distributed", "venus-deepspeed"}
    for rname, rt in runtimes.items():
        where = f"{name}/{rname}"
        assert rt["apiVersion"] == TRAINER_API and rt["metadata"]["namespace"] == NAMESPACE, where
        policy = rt["spec"]["mlPolicy"]
        assert sum(k in policy for k in ("torch", "mpi", "flux")) == 1, (
            f"{where}: one policy source"
        )
        nproc = policy["torch"]["numProcPerNode"]
        assert nproc in ("auto", "cpu", "gpu") or (isinstance(nproc, int) and nproc > 0), where
        assert isinstance(policy["numNodes"], int) and policy["numNodes"] >= 1, where
        jobs = rt["spec"]["template"]["spec"]["replicatedJobs"]
        node = next((j for j in jobs if j["name"] == "node"), None)
        assert node is not None, f"{where}: no replicatedJob 'node'"
        labels = node["template"]["metadata"]["labels"]
        assert labels.get("trainer.kubeflow.org/trainjob-ancestor-step") == "trainer", where
        pod = node["template"]["spec"]["template"]["spec"]
        assert [c["name"] for c in pod["containers"]] == ["node"], (
            f"{where}: the trainer patches container 'node'"
        )
        for job in jobs:  # the embedded Job templates are plain batch/v1 Job specs
            wrapped = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": f"{rname}-{job['name']}"},
                **copy.deepcopy(job["template"]),
            }
            wrapped["metadata"].update(job["template"].get("metadata", {}))
            kubernetes_validate.validate(wrapped, K8S_VERSION, strict=True)


# ---------------------------------------------------------------------------- pod security


def _pod_specs(doc: Doc) -> list[Doc]:
    kind = doc["kind"]
    if kind in ("Deployment", "StatefulSet", "Job"):
        return [doc["spec"]["template"]["spec"]]
    if kind == "TrainingRuntime":
        return [
            j["template"]["spec"]["template"]["spec"]
            for j in doc["spec"]["template"]["spec"]["replicatedJobs"]
        ]
    return []


def _all_containers(docs: list[Doc]) -> list[tuple[Doc, Doc, Doc]]:
    return [
        (d, pod, c)
        for d in docs
        for pod in _pod_specs(d)
        for c in pod.get("initContainers", []) + pod["containers"]
    ]


def test_every_container_has_limits_and_runs_non_root(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    problems, exempted = [], set()
    for doc, pod, c in _all_containers(docs):
        where = f"{name}: {doc['kind']}/{doc['metadata']['name']} container {c['name']}"
        limits = c.get("resources", {}).get("limits", {})
        requests = c.get("resources", {}).get("requests", {})
        if not {"cpu", "memory"} <= set(limits) or not {"cpu", "memory"} <= set(requests):
            problems.append(f"{where}: cpu/memory requests and limits required")
        ident = (doc["kind"], doc["metadata"]["name"], c["name"])
        sc, psc = c.get("securityContext", {}), pod.get("securityContext", {})
        if sc.get("privileged") or sc.get("allowPrivilegeEscalation", True):
            problems.append(f"{where}: privileged or privilege escalation allowed")
        if sc.get("capabilities", {}).get("drop") != ["ALL"] or sc.get("capabilities", {}).get("add"):
            problems.append(f"{where}: capabilities not all dropped")
        if ident in EXEMPT_NON_ROOT:
            exempted.add(ident)
            continue
        if not (sc.get("runAsNonRoot") or (psc.get("runAsNonRoot") and "runAsNonRoot" not in sc)):
            problems.append(f"{where}: runAsNonRoot not set")
        if not sc.get("readOnlyRootFilesystem"):
            problems.append(f"{where}: readOnlyRootFilesystem not set")
    assert problems == []
    assert exempted == EXEMPT_NON_ROOT, "an exemption no longer matches a container: remove it"
