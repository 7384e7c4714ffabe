"""Wiring checks of the rendered overlays (see test_manifests.py for rendering and schemas).

GPU limits and tolerations, namespaces, RBAC scope, Secret references against the example file,
Services / PVC / images against the production agent spec, the vLLM serving contract, and the
device gateway: its device table (read with the gateway's own parser) against the pool
StatefulSets, and a real gateway shard started with the Deployment's own flags.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from proc_lines import wait_for_line
from test_manifests import MANIFESTS, NAMESPACE, OVERLAYS, ROOT, Doc, _all_containers, _key, render


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[Doc]]:
    return request.param, render(MANIFESTS / "overlays" / request.param)


def test_gpu_limits_only_where_gpus_are_expected(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    gpu = sorted(
        {
            d["metadata"]["name"]
            for d, _, c in _all_containers(docs)
            if "nvidia.com/gpu" in c["resources"]["limits"]
        }
    )
    expected = [] if name == "local" else ["venus-deepspeed", "venus-torch-distributed", "vllm",
                                           "vllm-rollout-mobile", "vllm-rollout-web"]
    assert gpu == expected
    for d, pod, c in _all_containers(docs):
        if "nvidia.com/gpu" in c["resources"]["limits"]:
            keys = {t["key"] for t in pod.get("tolerations", [])}
            assert "nvidia.com/gpu" in keys, (
                f"{name}: {d['metadata']['name']} has GPUs but no toleration"
            )


def test_namespaced_objects_live_in_venus(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    for d in docs:
        if d["kind"] == "Namespace":
            assert d["metadata"]["name"] == NAMESPACE
        else:
            assert d["metadata"].get("namespace") == NAMESPACE, (
                f"{name}: {_key(d)} not in {NAMESPACE}"
            )


def test_rbac_is_namespaced_and_scoped(overlay: tuple[str, list[Doc]]) -> None:
    _, docs = overlay
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    role = next(
        d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "venus-pipeline"
    )
    grants = {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert "create" in grants[("trainer.kubeflow.org", "trainjobs")]
    assert "create" in grants[("", "pods")] and "create" in grants[("", "persistentvolumeclaims")]
    assert grants[("", "secrets")] == {"get"}
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "venus-pipeline",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "venus-pipeline", "namespace": NAMESPACE}
    ]


def _secret_refs(docs: list[Doc]) -> set[tuple[str, str | None]]:
    refs: set[tuple[str, str | None]] = set()
    for _, _, c in _all_containers(docs):
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                refs.add((ref["name"], ref["key"]))
        refs |= {(s["secretRef"]["name"], None) for s in c.get("envFrom", []) if "secretRef" in s}
    for _, pod, _ in _all_containers(docs):  # mounted Secrets (the gateway's TLS files)
        refs |= {(v["secret"]["secretName"], None) for v in pod.get("volumes", []) if "secret" in v}
    return refs


def test_secrets_come_from_the_example_not_the_kustomization(
    overlay: tuple[str, list[Doc]],
) -> None:
    name, docs = overlay
    assert not [d for d in docs if d["kind"] == "Secret"], f"{name}: Secrets must not be rendered"
    base = yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text(encoding="utf-8"))
    assert "secrets.example.yaml" not in base["resources"]
    example = {
        d["metadata"]["name"]: set(d["stringData"])
        for d in yaml.safe_load_all(
            (MANIFESTS / "base" / "secrets.example.yaml").read_text(encoding="utf-8")
        )
    }
    for secret, key in _secret_refs(docs):
        assert secret in example, (
            f"{name}: Secret {secret} is not described in secrets.example.yaml"
        )
        assert key is None or key in example[secret], (
            f"{name}: key {secret}/{key} missing from the example"
        )
    spec = yaml.safe_load((ROOT / "agents/ui-venus-1.5-8b/agent.yaml").read_text(encoding="utf-8"))[
        "platform"
    ]
    assert {spec["storage_secret"], spec["tracking_secret"]} <= set(example)


def test_wiring_matches_the_production_spec() -> None:
    """Service names, PVC and images of gpu-cluster are the ones agents/ui-venus-1.5-8b names."""
    spec = yaml.safe_load((ROOT / "agents/ui-venus-1.5-8b/agent.yaml").read_text(encoding="utf-8"))[
        "platform"
    ]
    docs = render(MANIFESTS / "overlays" / "gpu-cluster")
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("PersistentVolumeClaim", spec["checkpoints_pvc"]) in names
    assert spec["namespace"] == NAMESPACE
    ports = {
        (d["metadata"]["name"], p["port"])
        for d in docs
        if d["kind"] == "Service"
        for p in d["spec"]["ports"]
    }
    for url in (spec["tracking_uri"], spec["s3_endpoint"]):
        host, port = url.split("//")[1].split(":")
        service, namespace = host.split(".")[:2]
        assert namespace == NAMESPACE and (service, int(port)) in ports, (
            f"{url} has no matching Service"
        )
    used = {c["image"] for _, _, c in _all_containers(docs)}
    for key, ref in spec["images"].items():
        assert ref in used, f"platform.images.{key}={ref} is not deployed by gpu-cluster"


def test_vllm_serving_contract() -> None:
    docs = render(MANIFESTS / "overlays" / "gpu-cluster")
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "vllm")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert any(a.startswith("--max-model-len=") for a in c["args"])
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert "vllm" not in {d["metadata"]["name"] for d in render(MANIFESTS / "overlays" / "local")}


def test_the_8b_specs_judge_is_the_vllm_server() -> None:
    """scoring.endpoint names the `vllm` Service, scoring.judge_model is a name that server serves,
    the API key the score_data pods get (scoring.api_key_secret) is the one the server checks, and
    the Secret is described in the example; rewrite and rebuild run (an MLLM judge, on_low_score)."""
    from pipelines.k8s import JUDGE_KEYS
    from venus_core.config import load_spec

    scoring = load_spec(ROOT / "agents" / "ui-venus-1.5-8b").scoring
    assert scoring.enabled and scoring.judge == "openai" and scoring.on_low_score == "rebuild"
    assert scoring.endpoint is not None and scoring.endpoint.endswith("/v1")
    docs = render(MANIFESTS / "overlays" / "gpu-cluster")
    host, port = scoring.endpoint.split("//")[1].removesuffix("/v1").split(":")
    service_name, namespace = host.split(".")[:2]
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == service_name)
    assert namespace == NAMESPACE and int(port) in {p["port"] for p in service["spec"]["ports"]}
    dep = next(d for d in docs if d["kind"] == "Deployment"
               and d["spec"]["selector"]["matchLabels"].items() <= service["spec"]["selector"].items())
    c = dep["spec"]["template"]["spec"]["containers"][0]
    served: list[str] = []  # vLLM's --served-model-name takes one or more names
    for arg in c["args"][c["args"].index("--served-model-name") + 1:]:
        if arg.startswith("--"):
            break
        served.append(arg)
    assert scoring.judge_model in served, served
    ref = next(e for e in c["env"] if e["name"] == "VLLM_API_KEY")["valueFrom"]["secretKeyRef"]
    assert ref["name"] == scoring.api_key_secret and ref["key"] in JUDGE_KEYS
    example = {d["metadata"]["name"]: d for d in yaml.safe_load_all(
        (MANIFESTS / "base" / "secrets.example.yaml").read_text(encoding="utf-8"))}
    assert set(JUDGE_KEYS) <= set(example[scoring.api_key_secret]["stringData"])


def test_rollout_servers_serve_what_online_rl_asks_for() -> None:
    """Per online-RL domain: the spec's rollout_server URL names a Service of a vLLM Deployment that
    runs the worker extension in dev mode, serves the spec's rollout_model with processed log-probs,
    and mounts the checkpoints PVC read-only where `launch` puts the weights; only pods with the
    label the pipeline gives online_rl pods may reach it."""
    from pipelines.k8s import ROLLOUT_CLIENT_LABEL
    from venus_core.config import load_spec
    from venus_core.models.serve_rpc import load_extension
    from venus_core.rl.online.vllm_worker import EXTENSION_CLS, WEIGHTS_ROOT_ENV
    from venus_core.runtime.launch import CHECKPOINTS_MOUNT
    from venus_core.runtime.online_rl import DOMAINS, rollout_server_of

    spec = load_spec(ROOT / "agents" / "ui-venus-1.5-8b")
    o = spec.online_rl
    assert o.enabled and o.rollout_server_kind == "vllm" and "{domain}" in (o.rollout_server or "")
    docs = render(MANIFESTS / "overlays" / "gpu-cluster")
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert "vllm-rollout" not in str(render(MANIFESTS / "overlays" / "local"))
    served_pods = []
    for domain in DOMAINS:
        url = rollout_server_of(o, domain)
        assert url is not None and url.endswith("/v1")
        host, port = url.split("//")[1].removesuffix("/v1").split(":")
        service_name, namespace = host.split(".")[:2]
        assert namespace == NAMESPACE
        service = by_name[("Service", service_name)]
        assert int(port) in {p["port"] for p in service["spec"]["ports"]}
        dep = next(d for d in docs if d["kind"] == "Deployment"
                   and d["spec"]["selector"]["matchLabels"].items() <= service["spec"]["selector"].items())
        pod = dep["spec"]["template"]
        served_pods.append(pod["metadata"]["labels"])
        c = pod["spec"]["containers"][0]
        assert c["image"] == spec.platform.images.rollout
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["VLLM_SERVER_DEV_MODE"] == "1" and env[WEIGHTS_ROOT_ENV] == str(CHECKPOINTS_MOUNT)
        assert f"--worker-extension-cls={EXTENSION_CLS}" in c["args"]
        load_extension(EXTENSION_CLS)  # the class the flag names exists (the image imports it at build)
        assert f"--served-model-name={o.rollout_model}" in c["args"]
        assert "--logprobs-mode=processed_logprobs" in c["args"]
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        claim = next(n for n, v in volumes.items() if "persistentVolumeClaim" in v)
        assert volumes[claim]["persistentVolumeClaim"] == {"claimName": spec.platform.checkpoints_pvc, "readOnly": True}
        assert mounts[claim]["mountPath"] == str(CHECKPOINTS_MOUNT) and mounts[claim]["readOnly"] is True
        assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    policies = [d for d in docs if d["kind"] == "NetworkPolicy" and d["spec"]["podSelector"].get("matchLabels")
                and "Ingress" in d["spec"]["policyTypes"]  # (their egress: the storage-clients policy)
                and all(d["spec"]["podSelector"]["matchLabels"].items() <= labels.items() for labels in served_pods)]
    assert len(policies) == 1
    [policy] = policies
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": dict([ROLLOUT_CLIENT_LABEL])}}],
                                          "ports": [{"protocol": "TCP", "port": 8000}]}]
    # the judge / evaluation server keeps fixed weights: no dev mode there
    judge = by_name[("Deployment", "vllm")]["spec"]["template"]["spec"]["containers"][0]
    assert "VLLM_SERVER_DEV_MODE" not in {e["name"] for e in judge["env"]}


# Device kind and port of each device-pool StatefulSet, as the gateway's device table must name them.
POOLS = {"android-emulator": ("android", 5555), "browser": ("web", 9223)}


def test_gateway_device_table_lists_exactly_the_pool_pods(overlay: tuple[str, list[Doc]]) -> None:
    """The table, read with the gateway's own parser, names every pool pod by its stable DNS name."""
    from venus_core.daas.routing import parse_devices

    name, docs = overlay
    cm = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "device-gateway"
    )
    table = yaml.safe_load(cm["data"]["devices.yaml"])["devices"]
    got = {(s.id, s.kind, s.endpoint) for s in parse_devices(table, f"{name}: device-gateway")}
    want = set()
    for d in docs:
        if d["kind"] == "StatefulSet" and d["metadata"]["name"] in POOLS:
            kind, port = POOLS[d["metadata"]["name"]]
            svc = d["spec"]["serviceName"]
            for i in range(d["spec"]["replicas"]):
                pod = f"{d['metadata']['name']}-{i}"
                want.add((pod, kind, f"{pod}.{svc}.{NAMESPACE}.svc.cluster.local:{port}"))
    assert got == want, f"{name}: device table and pool replicas disagree"
    ports = {
        (d["metadata"]["name"], p["port"])
        for d in docs
        if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"
        for p in d["spec"]["ports"]
    }
    assert {(svc, port) for svc, (_, port) in POOLS.items()} <= ports
    gateway = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "device-gateway"
    )
    command = gateway["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["venus", "gateway"] and "--devices=/etc/venus/devices.yaml" in command


# Runs the `gateway` command of venus_core.cli.gateway_cmd on its own typer app, so that the test
# exercises the manifest's flags whether or not `venus` itself has mounted the command yet.
_GATEWAY_MAIN = """
import typer
from venus_core.cli.gateway_cmd import register
app = typer.Typer()
@app.callback()
def _root() -> None: pass
register(app)
app()
"""


@pytest.mark.timeout(60)
def test_gateway_starts_with_the_manifest_flags_and_table(tmp_path: Path) -> None:
    """The gpu-cluster Deployment's own arguments and device table start a real gateway shard (ports
    replaced by free ones, loopback, the TLS files of its Secret made by a test CA); its lease
    registry answers /v1/status with every device over mutual TLS, and not without a client
    certificate or over plain HTTP."""
    import ssl

    from tls_certs import make_pki
    docs = render(MANIFESTS / "overlays" / "gpu-cluster")
    cm = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "device-gateway"
    )
    (tmp_path / "devices.yaml").write_text(cm["data"]["devices.yaml"])
    gateway = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "device-gateway"
    )
    pod = gateway["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    tls_mount = next(m["mountPath"] for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tls")
    assert next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]["secretName"] == "venus-gateway-tls"
    pki = make_pki(tmp_path / "pki")
    files = {f"{tls_mount}/tls.crt": pki.server.cert, f"{tls_mount}/tls.key": pki.server.key,
             f"{tls_mount}/ca.crt": pki.ca}
    tls_flags = {k: v for k, v in (a.partition("=")[::2] for a in command) if k.startswith("--tls-")}
    assert set(tls_flags) == {"--tls-cert", "--tls-key", "--tls-client-ca"} and set(tls_flags.values()) == set(files)
    local = {
        "--devices": str(tmp_path / "devices.yaml"),
        "--host": "127.0.0.1",
        "--port": "0",
        "--metrics-port": "0",
        "--registry-port": "0",
        **{k: str(files[v]) for k, v in tls_flags.items()},
    }
    args = []
    for arg in command[2:]:
        key, eq, _ = arg.partition("=")
        args.append(f"{key}={local[key]}" if eq and key in local else arg)
    env = {**os.environ, "VENUS_GATEWAY_SECRET": "s" * 32}
    proc = subprocess.Popen(
        [sys.executable, "-c", _GATEWAY_MAIN, "gateway", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = wait_for_line(proc.stdout, lambda s: bool(s.strip()), timeout=45, what="venus gateway")
        found = re.search(r"registry (https://\S+)", line)
        assert found and "mTLS" in line, (
            f"gateway did not start: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
        )
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        ctx.load_cert_chain(pki.clients["worker-1"].cert, pki.clients["worker-1"].key)
        with urllib.request.urlopen(found.group(1) + "/v1/status", timeout=10, context=ctx) as resp:
            status = yaml.safe_load(resp.read())
        assert status["devices"] == len(yaml.safe_load(cm["data"]["devices.yaml"])["devices"]) == 32
        no_cert = ssl.create_default_context(cafile=str(pki.ca))
        with pytest.raises(OSError):
            urllib.request.urlopen(found.group(1) + "/v1/status", timeout=10, context=no_cert)
        with pytest.raises(OSError):
            urllib.request.urlopen(found.group(1).replace("https", "http") + "/v1/status", timeout=10)
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def _s3_uris(node: object) -> list[str]:
    if isinstance(node, str):
        return [node] if node.startswith("s3://") else []
    if isinstance(node, dict):
        return [u for v in node.values() for u in _s3_uris(v)]
    if isinstance(node, list):
        return [u for v in node for u in _s3_uris(v)]
    return []


def test_buckets_and_served_model_match_the_agent_specs() -> None:
    """Every bucket an agent spec names is created by the minio-buckets Job; vLLM serves the
    production spec's base model."""
    docs = render(MANIFESTS / "overlays" / "gpu-cluster")
    job = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "minio-buckets")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    created = {a.removeprefix("local/") for a in command if a.startswith("local/")}
    specs = sorted((ROOT / "agents").glob("*/agent.yaml"))
    assert specs
    for path in specs:
        for uri in _s3_uris(yaml.safe_load(path.read_text(encoding="utf-8"))):
            bucket = uri.removeprefix("s3://").split("/")[0]
            assert bucket in created, f"{path}: bucket of {uri} is not created by minio-buckets"
    spec = yaml.safe_load((ROOT / "agents/ui-venus-1.5-8b/agent.yaml").read_text(encoding="utf-8"))
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "vllm")
    assert "s3://" + cm["data"]["MODEL_PATH"] == spec["model"]["base"]


def test_trainjob_example_matches_runtime_and_spec() -> None:
    """manifests/examples/trainjob-mid-train.yaml names an existing namespaced runtime (with
    kind TrainingRuntime: the API defaults to ClusterTrainingRuntime), a real runtime module, a
    spec file shipped in the image, and the production spec's node / process / GPU counts."""
    (job,) = yaml.safe_load_all(
        (MANIFESTS / "examples" / "trainjob-mid-train.yaml").read_text(encoding="utf-8")
    )
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and job["kind"] == "TrainJob"
    docs = render(MANIFESTS / "overlays" / "gpu-cluster")
    runtimes = {d["metadata"]["name"] for d in docs if d["kind"] == "TrainingRuntime"}
    ref = job["spec"]["runtimeRef"]
    assert ref["kind"] == "TrainingRuntime" and ref["name"] in runtimes
    trainer = job["spec"]["trainer"]
    assert trainer["command"][:2] == ["torchrun", "-m"]
    module = trainer["command"][2]
    assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), module
    spec_arg = next(a for a in trainer["args"] if a.startswith("--spec="))
    spec_path = ROOT / spec_arg.removeprefix("--spec=/opt/venus/")
    assert spec_path.is_file(), spec_arg
    spec = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    dist, res = spec["mid_train"]["distributed"], spec["platform"]["resources"]["mid_train"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (
        dist["nodes"],
        dist["procs_per_node"],
    )
    assert int(trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"]) == res["gpu_count"]
    assert trainer["image"] == spec["platform"]["images"]["train"]


def test_index_based_patches_hit_the_intended_fields() -> None:
    """JSON6902 paths address list items by index; these assertions fail if a base edit reorders
    the lists so that an overlay patch lands on a different item."""
    local = render(MANIFESTS / "overlays" / "local")
    mlflow = next(
        d for d in local if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlflow"
    )
    args = mlflow["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--workers")] == ["--workers=1"]
    assert any(a.startswith("--backend-store-uri=") for a in args)
    gpu = render(MANIFESTS / "overlays" / "gpu-cluster")
    ds = next(
        d
        for d in gpu
        if d["kind"] == "TrainingRuntime" and d["metadata"]["name"] == "venus-deepspeed"
    )
    pod = ds["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"
    ]
    sizes = {v["name"]: v["emptyDir"].get("sizeLimit") for v in pod["volumes"] if "emptyDir" in v}
    assert sizes["dshm"] == "64Gi" and sizes["home"] is None
    for docs in (local, gpu):
        for d in docs:
            if d["kind"] == "TrainingRuntime":
                job = d["spec"]["template"]["spec"]["replicatedJobs"][0]
                assert (
                    job["name"] == "node"
                    and job["template"]["spec"]["template"]["spec"]["containers"][0]["name"]
                    == "node"
                )
