"""Least privilege in every rendered object of both overlays (issue 22 §4).

* RBAC: the verbs of each ServiceAccount, resolved through its RoleBindings, equal the table
  below (a new grant is a deliberate edit here); no ClusterRoles, wildcards, escalation verbs or
  exec; Secrets readable only by name; no workload pod mounts an API token.
* Host access: no privileged container, no host namespaces, host paths or host ports; /dev/kvm
  only for the emulator (the device plugin's resource), and the namespace enforces Pod Security
  "baseline" at least. (Limits, non-root and read-only root filesystems: test_manifests.py.)
* Network: a default deny on ingress selects every pod; who may reach each Service port equals
  the table below (evaluated with label selectors as Kubernetes does); device pods (browsers and
  emulators an agent drives) reach none of the platform's services.
* TLS: the gateway runs with mutual TLS from a mounted Secret, and is probed where no client
  certificate is needed.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from test_manifests import MANIFESTS, NAMESPACE, OVERLAYS, Doc, _key, render

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
    assert [p["spec"] for p in deny] == [{"podSelector": {}, "policyTypes": ["Ingress"]}], name
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
