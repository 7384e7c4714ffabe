"""Least privilege in every rendered object of both overlays (issue 22 §4).

* RBAC: the verbs of each ServiceAccount, resolved through its RoleBindings, equal the table
  below (a new grant is a deliberate edit here); no ClusterRoles, wildcards, escalation verbs or
  exec; Secrets readable only by name; no workload pod mounts an API token.
* Host access: no privileged container, no host namespaces, host paths or host ports; /dev/kvm
  only for the emulator (the device plugin's resource), and the namespace enforces Pod Security
  "baseline" at least. (Limits, non-root and read-only root filesystems: test_manifests.py.)
* Network: a default deny on ingress and egress selects every pod; who may reach each Service port
  equals the table below (evaluated with label selectors as Kubernetes does); device pods (browsers and
  emulators an agent drives) reach none of the platform's services; what each pod may open (egress,
  evaluated against probe destinations: the platform's ports, the cluster DNS, Kubeflow, the
  Kubernetes API, the cloud metadata endpoint, a public address) equals the EGRESS table, and every
  connection the ingress table admits is also open on its client's side.
* TLS: the gateway runs with mutual TLS from a mounted Secret, and is probed where no client
  certificate is needed.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import kubernetes_validate
import pytest
import yaml
from test_manifests import K8S_VERSION, MANIFESTS, NAMESPACE, OVERLAYS, Doc, _key, render

KVM = "devices.kubevirt.io/kvm"
EMULATOR = ("StatefulSet", "android-emulator")
CRUD = {"create", "get", "list", "watch", "patch", "delete"}
READ = {"get", "list", "watch"}
# ServiceAccount -> (apiGroup, resource[:resourceNames]) -> verbs
GRANTS: dict[str, dict[tuple[str, str], set[str]]] = {
    "venus-pipeline": {
        ("trainer.kubeflow.org", "trainjobs"): CRUD,
        ("trainer.kubeflow.org", "trainjobs/status"): READ,
        ("trainer.kubeflow.org", "trainingruntimes"): READ,
        ("", "pods"): CRUD,  # patch: the device pool labels leased pods
        ("", "pods/log"): READ,
        ("", "events"): READ,
        ("", "persistentvolumeclaims"): CRUD - {"patch"},
        ("", "configmaps"): READ,
        ("", "secrets:venus-minio,venus-mlflow"): {"get"},  # the two client credentials only
        ("argoproj.io", "workflowtaskresults"): {"create", "patch"},  # Argo's executor, as the run's account
    },
}
DANGEROUS_VERBS = {"*", "escalate", "bind", "impersonate"}
DANGEROUS_RESOURCES = {"*", "pods/exec", "pods/attach", "pods/portforward", "nodes/proxy",
                       "serviceaccounts/token", "roles", "rolebindings"}

PIPELINE = "pods with pipeline/runid"  # every pod of a KFP run
# (Service, port) -> who may connect
INGRESS: dict[tuple[str, int], set[str]] = {
    ("minio", 9000): {PIPELINE, "pods venus.dev/storage-client=true"},
    ("mlflow", 5000): {PIPELINE, "pods venus.dev/tracking-client=true"},
    ("mlflow-postgres", 5432): {"pods app.kubernetes.io/name=mlflow"},
    ("device-gateway", 7000): {PIPELINE, "pods venus.dev/device-client=true"},
    ("device-gateway", 7070): {PIPELINE, "pods venus.dev/device-client=true"},
    ("device-gateway", 9100): {"any namespace"},
    ("android-emulator", 5555): {"pods app.kubernetes.io/name=device-gateway"},
    ("browser", 9223): {"pods app.kubernetes.io/name=device-gateway"},
    ("vllm", 8000): {PIPELINE},
    ("vllm-rollout-mobile", 8000): {"pods venus.dev/rollout-client=true"},
    ("vllm-rollout-web", 8000): {"pods venus.dev/rollout-client=true"},
}
PORT_FORWARD_ONLY = {("minio", 9001)}  # the MinIO console: kubectl port-forward (not filtered)
# which workloads must carry which client label to reach what they use
CLIENT_LABELS = {
    ("Deployment", "mlflow"): {"venus.dev/storage-client"},
    ("Job", "minio-buckets"): {"venus.dev/storage-client"},
    ("Deployment", "vllm"): {"venus.dev/storage-client"},
    ("Deployment", "vllm-rollout-mobile"): {"venus.dev/storage-client"},
    ("Deployment", "vllm-rollout-web"): {"venus.dev/storage-client"},
    ("TrainingRuntime", "venus-torch-distributed"): {"venus.dev/storage-client",
                                                     "venus.dev/tracking-client"},
    ("TrainingRuntime", "venus-deepspeed"): {"venus.dev/storage-client",
                                             "venus.dev/tracking-client"},
}


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[Doc]]:
    return request.param, render(MANIFESTS / "overlays" / request.param)


def _templates(doc: Doc) -> list[Doc]:
    """The pod templates (metadata + spec) of a workload object."""
    if doc["kind"] in ("Deployment", "StatefulSet", "Job"):
        return [doc["spec"]["template"]]
    if doc["kind"] == "TrainingRuntime":
        return [j["template"]["spec"]["template"] for j in doc["spec"]["template"]["spec"]["replicatedJobs"]]
    return []


def _workloads(docs: list[Doc]) -> list[tuple[Doc, Doc]]:
    return [(d, t) for d in docs for t in _templates(d)]


# ------------------------------------------------------------------------------------- RBAC


def service_account_grants(docs: list[Doc]) -> dict[str, dict[tuple[str, str], set[str]]]:
    """ServiceAccount -> (apiGroup, resource[:names]) -> verbs, through RoleBindings."""
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Role"}
    out: dict[str, dict[tuple[str, str], set[str]]] = {}
    for sa in (d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"):
        table: dict[tuple[str, str], set[str]] = {}
        for b in (d for d in docs if d["kind"] == "RoleBinding"):
            if not any(s["kind"] == "ServiceAccount" and s["name"] == sa and s.get("namespace") == NAMESPACE
                       for s in b["subjects"]):
                continue
            assert b["roleRef"]["kind"] == "Role", f"{b['metadata']['name']}: binds a {b['roleRef']['kind']}"
            for rule in roles[b["roleRef"]["name"]]["rules"]:
                names = ",".join(sorted(rule.get("resourceNames", [])))
                for group in rule["apiGroups"]:
                    for res in rule["resources"]:
                        key = (group, f"{res}:{names}" if names else res)
                        table.setdefault(key, set()).update(rule["verbs"])
        out[sa] = table
    return out


def test_each_service_account_has_exactly_its_listed_verbs(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    assert not {d["kind"] for d in docs} & {"ClusterRole", "ClusterRoleBinding"}
    grants = service_account_grants(docs)
    assert grants == GRANTS, f"{name}: RBAC differs from the reviewed table"
    for sa, table in grants.items():
        for (group, res), verbs in table.items():
            assert group != "*" and not verbs & DANGEROUS_VERBS, (sa, group, res, verbs)
            assert res.split(":")[0] not in DANGEROUS_RESOURCES, (sa, res)
            if res.startswith("secrets"):
                assert ":" in res and verbs == {"get"}, f"{sa}: Secrets only by name, only get"


def test_no_workload_pod_mounts_an_api_token(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    for doc, t in _workloads(docs):
        assert t["spec"].get("automountServiceAccountToken") is False, f"{name}: {_key(doc)}"
        assert t["spec"].get("serviceAccountName") in (None, "default"), f"{name}: {_key(doc)}"


# ------------------------------------------------------------------------------- host access


def test_no_host_access_and_kvm_only_for_the_emulator(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    for doc, t in _workloads(docs):
        spec, where = t["spec"], f"{name}: {_key(doc)}"
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), where
        assert not [v for v in spec.get("volumes", []) if "hostPath" in v], f"{where}: hostPath"
        for c in spec.get("initContainers", []) + spec["containers"]:
            assert not c.get("securityContext", {}).get("privileged"), f"{where}: privileged"
            assert not [p for p in c.get("ports", []) if "hostPort" in p], f"{where}: hostPort"
            assert "/dev/kvm" not in {m["mountPath"] for m in c.get("volumeMounts", [])}, where
            res = c.get("resources", {})
            wants_kvm = KVM in res.get("limits", {}) or KVM in res.get("requests", {})
            emulator = (doc["kind"], doc["metadata"]["name"]) == EMULATOR
            assert wants_kvm == emulator, f"{where} container {c['name']}: /dev/kvm"
            if emulator:
                assert res["limits"][KVM] == res["requests"][KVM] == "1"
                assert spec["nodeSelector"] == {"venus.dev/kvm": "true"}
    ns = next(d for d in docs if d["kind"] == "Namespace")["metadata"]["labels"]
    assert ns["pod-security.kubernetes.io/enforce"] in ("baseline", "restricted")


# ----------------------------------------------------------------------------------- network


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics (matchLabels AND matchExpressions); {} selects all."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def _peer(p: dict[str, Any]) -> str:
    assert "ipBlock" not in p, "policies name pods, not addresses"
    if "namespaceSelector" in p:
        assert p["namespaceSelector"] == {} and "podSelector" not in p, p
        return "any namespace"
    sel = p["podSelector"]
    terms = [f"{k}={v}" for k, v in sorted(sel.get("matchLabels", {}).items())]
    for e in sel.get("matchExpressions", []):
        assert e["operator"] == "Exists", e
        terms.append(f"with {e['key']}")
    assert terms, "a podSelector {} in a `from` admits every pod of the namespace"
    return "pods " + " ".join(terms)


def _policies(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


def _container_port(template: Doc, target: int | str) -> int:
    for c in template["spec"]["containers"]:
        for p in c.get("ports", []):
            if target in (p.get("name"), p["containerPort"]):
                return int(p["containerPort"])
    raise AssertionError(f"no container port {target!r}")


def admitted(docs: list[Doc], labels: dict[str, str], port: int) -> set[str]:
    """Who may open `port` on a pod with `labels`, by the union of the policies selecting it."""
    who: set[str] = set()
    for pol in _policies(docs):
        if not _matches(pol["spec"]["podSelector"], labels) or "Ingress" not in pol["spec"]["policyTypes"]:
            continue
        for rule in pol["spec"].get("ingress", []):
            if "ports" in rule and port not in {p["port"] for p in rule["ports"]}:
                continue
            assert "from" in rule, f"{pol['metadata']['name']}: a rule without `from` admits everyone"
            who |= {_peer(p) for p in rule["from"]}
    return who


def test_a_default_deny_selects_every_pod(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    deny = [p for p in _policies(docs) if p["spec"]["podSelector"] == {}]
    assert [p["spec"] for p in deny] == [{"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}], name
    assert _workloads(docs) and all(_matches(deny[0]["spec"]["podSelector"], t["metadata"].get("labels", {}))
                                    for _, t in _workloads(docs))


def test_who_reaches_each_service_port_is_the_reviewed_table(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    found: dict[tuple[str, int], set[str]] = {}
    for svc in (d for d in docs if d["kind"] == "Service"):
        pods = [t for _, t in _workloads(docs) if _matches({"matchLabels": svc["spec"]["selector"]},
                                                             t["metadata"].get("labels", {}))]
        assert pods, f"{name}: Service {svc['metadata']['name']} selects no workload"
        for p in svc["spec"]["ports"]:
            key = (svc["metadata"]["name"], int(p["port"]))
            for t in pods:
                port = _container_port(t, p.get("targetPort", p["port"]))
                who = admitted(docs, t["metadata"]["labels"], port)
                assert found.setdefault(key, who) == who, f"{name}: {key} differs between its pods"
    expected = {k: v for k, v in INGRESS.items() if k[0] in {s for s, _ in found}}
    assert {k: v for k, v in found.items() if k not in PORT_FORWARD_ONLY} == expected, name
    assert all(found[k] == set() for k in PORT_FORWARD_ONLY), name


def test_device_pods_reach_no_platform_service(overlay: tuple[str, list[Doc]]) -> None:
    """A browser or emulator an agent drives, StatefulSet pod or the pool controller's bare pod
    (name suffix -pool), matches no `from` of any policy: it cannot reach MinIO, MLflow, Postgres,
    vLLM or the gateway."""
    name, docs = overlay
    devices = [t["metadata"]["labels"] for d, t in _workloads(docs)
               if d["metadata"]["name"] in ("android-emulator", "browser")]
    devices += [{**labels, "app.kubernetes.io/name": labels["app.kubernetes.io/name"] + "-pool"}
                for labels in devices]
    for pol in _policies(docs):
        for rule in pol["spec"].get("ingress", []):
            for peer in rule.get("from", []):
                if "podSelector" in peer:
                    assert not any(_matches(peer["podSelector"], lab) for lab in devices), (
                        f"{name}: policy {pol['metadata']['name']} admits a device pod")
    # and the pool controller's bare pods are covered like the StatefulSets' (gateway only)
    for labels in devices:
        assert admitted(docs, labels, 5555) == admitted(docs, labels, 9223) == {
            "pods app.kubernetes.io/name=device-gateway"}


def test_clients_carry_the_labels_of_what_they_use(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    for doc, t in _workloads(docs):
        want = CLIENT_LABELS.get((doc["kind"], doc["metadata"]["name"]), set())
        have = {k for k, v in t["metadata"].get("labels", {}).items() if v == "true" and k.endswith("-client")}
        assert have == want, f"{name}: {_key(doc)} client labels {sorted(have)}"


def test_selector_semantics() -> None:
    sel = {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"},
                                                            {"key": "c", "operator": "NotIn", "values": ["x"]}]}
    assert _matches(sel, {"a": "1", "b": ""}) and _matches({}, {"z": "9"})
    assert not _matches(sel, {"a": "1"}) and not _matches(sel, {"a": "2", "b": "y"})
    assert not _matches(sel, {"a": "1", "b": "", "c": "x"})
    assert _matches({"matchExpressions": [{"key": "k", "operator": "In", "values": ["p", "q"]}]}, {"k": "q"})


# --------------------------------------------------------------------------------------- TLS


def test_the_gateway_runs_mutual_tls_from_a_mounted_secret(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    dep = next(d for d in docs if _key(d) == ("apps/v1", "Deployment", "device-gateway"))
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    flags = dict(a.partition("=")[::2] for a in c["command"] if a.startswith("--"))
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    tls_volume = next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]
    example = {d["metadata"]["name"]: d for d in yaml.safe_load_all(
        (MANIFESTS / "base" / "secrets.example.yaml").read_text(encoding="utf-8"))}
    keys = set(example[tls_volume["secretName"]]["stringData"])
    for flag in ("--tls-cert", "--tls-key", "--tls-client-ca"):
        folder, _, file = flags[flag].rpartition("/")
        assert folder == mounts["tls"] and file in keys, f"{name}: {flag}={flags[flag]}"
    assert tls_volume["defaultMode"] == 0o400
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    probe = c["readinessProbe"]["httpGet"]["port"]
    assert ports.get(probe, probe) == int(flags["--metrics-port"]), "probes cannot present a client certificate"


# ------------------------------------------------------------------------------------ egress


@dataclass(frozen=True)
class Dest:
    """A probe destination: a pod (labels, namespace) or an address outside any pod (labels None),
    with the IP address an ipBlock would see (pod IPs from the pod network, 10.244.0.0/16)."""

    name: str
    port: int
    ip: str
    protocol: str = "TCP"
    labels: tuple[tuple[str, str], ...] | None = None
    namespace: str = NAMESPACE


PIPELINE_POD = {"pipeline/runid": "0f3c"}  # what KFP sets on every pod of a run
# outside the platform's own workloads
EXTERNAL = (
    Dest("kube-dns:53/UDP", 53, "10.244.0.10", "UDP", (("k8s-app", "kube-dns"),), "kube-system"),
    Dest("kube-dns:53/TCP", 53, "10.244.0.10", "TCP", (("k8s-app", "kube-dns"),), "kube-system"),
    Dest("node-local DNS:53/UDP", 53, "169.254.20.10", "UDP"),
    Dest("kubeflow ml-pipeline:8887", 8887, "10.244.3.4", labels=(("app", "ml-pipeline"),), namespace="kubeflow"),
    Dest("Kubernetes API:443", 443, "10.96.0.1"),
    Dest("cloud metadata:80", 80, "169.254.169.254"),
    Dest("public web:443", 443, "140.82.112.3"),
    Dest("public web IPv6:443", 443, "2606:4700::1111"),
    Dest("AWS metadata IPv6:80", 80, "fd00:ec2::254"),
)
DNS = {"kube-dns:53/UDP", "kube-dns:53/TCP", "node-local DNS:53/UDP"}
EVERYTHING_BUT_METADATA = "everything but the cloud metadata endpoints"
# source -> what it may open; sources are workloads ("Kind/name"), the pool's bare pods and
# pipeline pods; absent from an overlay = not rendered there
EGRESS: dict[str, set[str] | str] = {
    "pipeline pod": EVERYTHING_BUT_METADATA,
    "Deployment/minio": DNS,
    "Job/minio-buckets": DNS | {"minio:9000"},
    "Deployment/mlflow": DNS | {"minio:9000", "mlflow-postgres:5432"},
    "StatefulSet/mlflow-postgres": DNS,
    "Deployment/device-gateway": DNS | {"android-emulator:5555", "android-emulator-pool:5555",
                                        "browser:9223", "browser-pool:9223"},
    "StatefulSet/android-emulator": set(),
    "StatefulSet/browser": set(),
    "pool pod android-emulator-pool": set(),
    "pool pod browser-pool": set(),
    "TrainingRuntime/venus-torch-distributed": DNS | {"minio:9000", "mlflow:5000", "trainer node:29500"},
    "TrainingRuntime/venus-deepspeed": DNS | {"minio:9000", "mlflow:5000", "trainer node:29500"},
    "Deployment/vllm": DNS | {"minio:9000"},
    "Deployment/vllm-rollout-mobile": DNS | {"minio:9000"},
    "Deployment/vllm-rollout-web": DNS | {"minio:9000"},
}
METADATA = {"cloud metadata:80", "AWS metadata IPv6:80"}


def _ns_labels(namespace: str) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": namespace}


def _to_matches(peer: dict[str, Any], dest: Dest) -> bool:
    """Whether a `to` peer covers `dest`. An ipBlock is also taken to cover the pods whose IPs fall
    in it (whether it does is up to the CNI: the worst case for a deny)."""
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        ip, net = ipaddress.ip_address(dest.ip), ipaddress.ip_network(block["cidr"])
        return (ip.version == net.version and ip in net
                and not any(ip in ipaddress.ip_network(e) for e in block.get("except", [])))
    if dest.labels is None:
        return False
    if "namespaceSelector" in peer:
        if not _matches(peer["namespaceSelector"], _ns_labels(dest.namespace)):
            return False
    elif dest.namespace != NAMESPACE:
        return False
    return _matches(peer.get("podSelector", {}), dict(dest.labels))


def opens(docs: list[Doc], labels: dict[str, str], dest: Dest) -> bool:
    """Whether a pod of namespace venus with `labels` may open `dest`, by the union of the egress
    rules of the policies selecting it (a pod no egress policy selects would be open to all)."""
    pols = [p for p in _policies(docs)
            if "Egress" in p["spec"]["policyTypes"] and _matches(p["spec"]["podSelector"], labels)]
    assert pols, f"no egress policy selects {labels}"
    for pol in pols:
        for rule in pol["spec"].get("egress", []):
            ports = rule.get("ports")
            if ports and not any(p.get("protocol", "TCP") == dest.protocol and p["port"] == dest.port for p in ports):
                continue
            assert "to" in rule, f"{pol['metadata']['name']}: an egress rule without `to` opens everything"
            if any(_to_matches(peer, dest) for peer in rule["to"]):
                return True
    return False


def _pool_labels(labels: dict[str, str]) -> dict[str, str]:
    return {**labels, "app.kubernetes.io/name": labels["app.kubernetes.io/name"] + "-pool"}


def egress_sources(docs: list[Doc]) -> dict[str, dict[str, str]]:
    out = {f"{d['kind']}/{d['metadata']['name']}": t["metadata"].get("labels", {}) for d, t in _workloads(docs)}
    for name in ("android-emulator", "browser"):
        out[f"pool pod {name}-pool"] = _pool_labels(out[f"StatefulSet/{name}"])
    out["pipeline pod"] = dict(PIPELINE_POD)
    return out


def egress_probes(docs: list[Doc]) -> list[Dest]:
    """Every Service port of the overlay (at its pod's container port), the pool pods' ports, a
    trainer node's rendezvous port, and the destinations outside the platform."""
    probes: list[Dest] = []
    for i, svc in enumerate(d for d in docs if d["kind"] == "Service"):
        (t, *_) = [t for _, t in _workloads(docs) if _matches({"matchLabels": svc["spec"]["selector"]},
                                                               t["metadata"].get("labels", {}))]
        for p in svc["spec"]["ports"]:
            port = _container_port(t, p.get("targetPort", p["port"]))
            probes.append(Dest(f"{svc['metadata']['name']}:{p['port']}", port, f"10.244.1.{i + 1}",
                               labels=tuple(sorted(t["metadata"]["labels"].items()))))
    sources = egress_sources(docs)
    for name, port in (("android-emulator", 5555), ("browser", 9223)):
        probes.append(Dest(f"{name}-pool:{port}", port, "10.244.2.1",
                           labels=tuple(sorted(sources[f"pool pod {name}-pool"].items()))))
    trainer = sources["TrainingRuntime/venus-torch-distributed"]
    probes.append(Dest("trainer node:29500", 29500, "10.244.2.2", labels=tuple(sorted(trainer.items()))))
    return probes + list(EXTERNAL)


def test_what_each_pod_may_open_is_the_reviewed_table(overlay: tuple[str, list[Doc]]) -> None:
    name, docs = overlay
    probes = egress_probes(docs)
    everything = {d.name for d in probes}
    found = {src: {d.name for d in probes if opens(docs, labels, d)} for src, labels in egress_sources(docs).items()}
    expected = {src: (everything - METADATA if want == EVERYTHING_BUT_METADATA else set(want) & everything)
                for src, want in EGRESS.items() if src in found}
    assert set(found) == set(expected), f"{name}: sources {sorted(set(found) ^ set(expected))} not reviewed"
    for src in found:
        assert found[src] == expected[src], (f"{name}: {src} opens {sorted(found[src] - expected[src])} "
                                             f"beyond the table, lacks {sorted(expected[src] - found[src])}")


def test_device_pods_open_no_connection(overlay: tuple[str, list[Doc]]) -> None:
    """An agent-driven browser or emulator cannot reach the cluster, its DNS, the node's metadata
    credentials or anything else (the platform's tasks reach it over the DevTools / ADB tunnel)."""
    name, docs = overlay
    probes = egress_probes(docs)
    sources = egress_sources(docs)
    for src in ("StatefulSet/android-emulator", "StatefulSet/browser", "pool pod android-emulator-pool",
                "pool pod browser-pool"):
        assert [d.name for d in probes if opens(docs, sources[src], d)] == [], f"{name}: {src}"


def test_every_admitted_connection_is_open_on_the_client_side(overlay: tuple[str, list[Doc]]) -> None:
    """Ingress and egress agree: each workload the ingress policies admit to a port may also open
    it (a port admitted but not opened is a client that would hang on a connect)."""
    name, docs = overlay
    sources = egress_sources(docs)
    checked = 0
    for dest in egress_probes(docs):
        if dest.labels is None or dest.namespace != NAMESPACE:
            continue
        for src, labels in sources.items():
            pols = [p for p in _policies(docs) if "Ingress" in p["spec"]["policyTypes"]
                    and _matches(p["spec"]["podSelector"], dict(dest.labels))]
            admitted_here = any(
                (not rule.get("ports") or dest.port in {p["port"] for p in rule["ports"]})
                and any("podSelector" in peer and "namespaceSelector" not in peer
                        and _matches(peer["podSelector"], labels) for peer in rule.get("from", []))
                for pol in pols for rule in pol["spec"].get("ingress", []))
            if admitted_here:
                checked += 1
                assert opens(docs, labels, dest), f"{name}: {src} is admitted to {dest.name} but may not open it"
    assert checked >= 10, checked


def test_egress_evaluation_semantics() -> None:
    docs = [{"kind": "NetworkPolicy", "metadata": {"name": "p"}, "spec": {
        "podSelector": {"matchLabels": {"a": "1"}}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}],
                    "ports": [{"protocol": "TCP", "port": 443}]},
                   {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "x"}},
                            "podSelector": {"matchLabels": {"b": "2"}}}]}]}}]
    web = Dest("w", 443, "1.2.3.4")
    assert opens(docs, {"a": "1"}, web)
    assert not opens(docs, {"a": "1"}, Dest("w", 80, "1.2.3.4"))  # port
    assert not opens(docs, {"a": "1"}, Dest("w", 443, "10.1.2.3"))  # except
    assert not opens(docs, {"a": "1"}, Dest("w", 443, "::1"))  # another IP version
    assert not opens(docs, {"a": "1"}, Dest("w", 443, "1.2.3.4", "UDP"))  # protocol
    assert opens(docs, {"a": "1"}, Dest("p", 9, "10.0.0.9", labels=(("b", "2"),), namespace="x"))
    assert not opens(docs, {"a": "1"}, Dest("p", 9, "10.0.0.9", labels=(("b", "2"),)))  # other namespace
    with pytest.raises(AssertionError, match="no egress policy"):
        opens(docs, {"a": "2"}, web)


def test_the_nodes_of_a_trainjob_admit_each_other_on_any_port(overlay: tuple[str, list[Doc]]) -> None:
    """A multi-node TrainJob: torchrun's rendezvous (29500 by default) and NCCL / gloo on ports they
    pick; under the default deny nothing else reaches a trainer pod."""
    name, docs = overlay
    for runtime in ("venus-torch-distributed", "venus-deepspeed"):
        labels = egress_sources(docs)[f"TrainingRuntime/{runtime}"]
        for port in (29500, 29400, 45123):
            assert admitted(docs, labels, port) == {"pods venus.dev/trainer-node=true"}, (name, runtime, port)


def test_the_public_web_example_opens_public_addresses_only(overlay: tuple[str, list[Doc]]) -> None:
    """manifests/examples/device-pods-public-web.yaml (opt-in, applied beside an overlay): device pods
    then open HTTP(S) to public addresses and the cluster DNS, never the platform, the Kubernetes
    API, private addresses or the metadata endpoint; no other pod gains anything."""
    name, docs = overlay
    (example,) = yaml.safe_load_all((MANIFESTS / "examples" / "device-pods-public-web.yaml").read_text(encoding="utf-8"))
    kubernetes_validate.validate(example, K8S_VERSION, strict=True)
    probes = egress_probes(docs) + [Dest("public web:80", 80, "93.184.215.14"), Dest("public web:22", 22, "93.184.215.14"),
                                    Dest("node:443", 443, "172.18.0.2"), Dest("CGNAT:443", 443, "100.64.1.1")]
    sources = egress_sources(docs)
    for src, labels in sources.items():
        before = {d.name for d in probes if opens(docs, labels, d)}
        after = {d.name for d in probes if opens(docs + [example], labels, d)}
        if "emulator" in src or "browser" in src:
            assert before == set() and after == DNS | {"public web:443", "public web IPv6:443", "public web:80"}, (name, src)
        else:
            assert after == before, (name, src)
