"""Compiling the agent specs' pipelines: golden IR files, graph, images, Kubernetes settings.

Goldens: tests/pipelines/golden/<agent>.yaml is the IR `venus compile agents/<agent>` writes. When a
change to the pipeline, a component, the spec schema or kfp is intended, refresh them with

    VENUS_UPDATE_GOLDEN=1 .venv/bin/pytest tests/pipelines/test_pipeline_compile.py

and review the diff (`git diff tests/pipelines/golden`) like any other code change.
"""

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import compiler

import components
from pipelines.compile import compile_pipeline
from pipelines.gui_agent import PipelineError, build_pipeline, spec_text
from venus_core.config import load_spec, spec_from_dict

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
AGENTS = ("venus-tiny", "ui-venus-1.5-8b")


def _load_ir(text: str) -> dict[str, Any]:
    """The pipeline spec, with the platform spec (a second YAML document, if any) under `platforms`."""
    docs = list(yaml.safe_load_all(text))
    ir = docs[0]
    for extra in docs[1:]:
        ir.update(extra)
    return ir


def _compile(spec: Any, tmp: Path) -> dict[str, Any]:
    path = tmp / "p.yaml"
    compiler.Compiler().compile(build_pipeline(spec), str(path))
    return _load_ir(path.read_text())


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, dict[str, Any]]]:
    out = {}
    for agent in AGENTS:
        path = compile_pipeline(ROOT / "agents" / agent, tmp_path_factory.mktemp(agent) / "pipeline.yaml")
        text = path.read_text()
        out[agent] = (text, _load_ir(text))
    return out


@pytest.mark.parametrize("agent", AGENTS)
def test_compiled_ir_matches_the_golden_file(agent: str, compiled: dict[str, tuple[str, dict[str, Any]]]) -> None:
    text, _ = compiled[agent]
    golden = GOLDEN / f"{agent}.yaml"
    if os.environ.get("VENUS_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert golden.is_file(), f"{golden} missing: run with VENUS_UPDATE_GOLDEN=1 to create it"
    assert text == golden.read_text(), f"{agent}: compiled IR differs from {golden} (see module docstring)"


@pytest.mark.parametrize("agent", AGENTS)
def test_kfp_loads_the_compiled_ir_back(agent: str, compiled: dict[str, tuple[str, dict[str, Any]]]) -> None:
    from kfp import components as kfp_components

    loaded = kfp_components.load_component_from_text(compiled[agent][0])
    assert "agent_spec" in loaded.component_spec.inputs and "merge_density" in loaded.component_spec.inputs


def _tasks(ir: dict[str, Any]) -> dict[str, Any]:
    return ir["root"]["dag"]["tasks"]


def test_the_graph_runs_the_stages_in_order(compiled: dict[str, tuple[str, dict[str, Any]]]) -> None:
    tasks = _tasks(compiled["venus-tiny"][1])
    deps = {name: sorted(t.get("dependentTasks", [])) for name, t in tasks.items()}
    assert deps == {
        "score-data": [],
        "mid-train": ["score-data"],
        "offline-rl": ["mid-train", "score-data"],
        "offline-rl-2": ["mid-train", "score-data"],
        "offline-rl-3": ["mid-train", "score-data"],
        "online-rl": ["offline-rl-2"],
        "online-rl-2": ["offline-rl-3"],
        "merge": ["mid-train", "offline-rl", "online-rl", "online-rl-2"],
        # the held-out suites come from the spec, not from score_data's validation split
        "evaluate": ["merge", "mid-train", "offline-rl", "offline-rl-2", "offline-rl-3", "online-rl", "online-rl-2"],
    }
    names = {name: t["taskInfo"]["name"] for name, t in tasks.items()}
    assert names["offline-rl-2"] == "offline_rl: mobile" and names["merge"] == "merge"
    assert all(t["cachingOptions"]["enableCache"] for t in tasks.values())
    domains = {tasks[n]["inputs"]["parameters"]["domain"]["runtimeValue"]["constant"]
               for n in ("offline-rl", "offline-rl-2", "offline-rl-3")}
    assert domains == {"grounding", "mobile", "web"}
    merge_in = tasks["merge"]["inputs"]["artifacts"]
    assert merge_in["web"]["taskOutputArtifact"] == {"outputArtifactKey": "model", "producerTask": "online-rl-2"}
    eval_in = tasks["evaluate"]["inputs"]["artifacts"]
    assert eval_in["web_offline"]["taskOutputArtifact"]["producerTask"] == "offline-rl-3"
    assert eval_in["web"]["taskOutputArtifact"]["producerTask"] == "online-rl-2"
    assert "data" not in eval_in
    assert tasks["evaluate"]["inputs"]["parameters"]["use_spec_suites"]["runtimeValue"]["constant"] is True


def test_without_held_out_suites_evaluate_falls_back_to_the_validation_split(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "agents" / "venus-tiny", ["eval.held_out_suites.enabled=false", "eval.suites=[]"])
    evaluate = _tasks(_compile(spec, tmp_path))["evaluate"]
    assert evaluate["inputs"]["artifacts"]["data"]["taskOutputArtifact"]["producerTask"] == "score-data"
    assert evaluate["inputs"]["parameters"]["use_spec_suites"]["runtimeValue"]["constant"] is False
    # the spec's own (live) suites alone are suites: no fallback
    live = load_spec(ROOT / "agents" / "venus-tiny", ["eval.held_out_suites.enabled=false"])
    assert live.eval.suites and _tasks(_compile(live, tmp_path))["evaluate"]["inputs"]["parameters"][
        "use_spec_suites"]["runtimeValue"]["constant"] is True


def test_the_flywheel_option_runs_generate_data_before_score_data(tmp_path: Path) -> None:
    """flywheel.enabled (off in both shipped specs) adds generate_data, whose dataset score_data gets as
    its optional `generated` input; the Secret of an openai judge goes to it only when it judges."""
    spec = load_spec(ROOT / "agents" / "ui-venus-1.5-8b", ["flywheel.enabled=true", "flywheel.judge=true"])
    ir = _compile(spec, tmp_path)
    tasks = _tasks(ir)
    assert tasks["generate-data"].get("dependentTasks") is None and tasks["generate-data"]["taskInfo"]["name"] == \
        "generate_data"
    assert tasks["score-data"]["dependentTasks"] == ["generate-data"]
    assert tasks["score-data"]["inputs"]["artifacts"]["generated"]["taskOutputArtifact"] == {
        "outputArtifactKey": "data", "producerTask": "generate-data"}
    assert ir["components"]["comp-generate-data"]["outputDefinitions"]["artifacts"]["metrics"]["artifactType"][
        "schemaTitle"] == "system.Metrics"
    description = ir["pipelineInfo"]["description"]
    assert description.split("Stages:\n", 1)[1].startswith(f"- generate_data: {components.summary('generate_data')}")
    secrets = ir["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-generate-data"]["secretAsEnv"]
    assert any(s["secretName"] == "venus-judge" for s in secrets)
    off = _compile(load_spec(ROOT / "agents" / "ui-venus-1.5-8b", ["flywheel.enabled=true"]), tmp_path)
    secrets = off["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-generate-data"].get("secretAsEnv", [])
    assert not any(s["secretName"] == "venus-judge" for s in secrets)


def test_online_rl_gets_the_judges_secret_only_when_the_judge_decides_success(tmp_path: Path) -> None:
    """The 8B spec's online_rl uses `success: auto` (its openai judge for tasks no rule can check):
    both online_rl pods get the judge's Secret; with `success: rules` they do not."""
    assert load_spec(ROOT / "agents" / "ui-venus-1.5-8b").online_rl.success == "auto"
    for success, mounted in (("auto", True), ("rules", False)):
        ir = _compile(load_spec(ROOT / "agents" / "ui-venus-1.5-8b", [f"online_rl.success={success}"]), tmp_path)
        executors = ir["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
        online = [v for k, v in executors.items() if k.startswith("exec-online-rl")]
        assert len(online) == 2, sorted(executors)
        for ex in online:
            assert any(s["secretName"] == "venus-judge" for s in ex.get("secretAsEnv", [])) is mounted


def test_ui_parameters_default_to_the_spec(compiled: dict[str, tuple[str, dict[str, Any]]]) -> None:
    params = compiled["ui-venus-1.5-8b"][1]["root"]["inputDefinitions"]["parameters"]
    assert params["mid_train_lr"]["defaultValue"] == 1e-5
    assert params["grounding_lr"]["defaultValue"] == 4e-7
    assert params["mobile_max_steps"]["defaultValue"] == 1000
    assert params["merge_method"]["defaultValue"] == "ties"
    assert params["merge_density"]["defaultValue"] == 0.2
    spec_text = params["agent_spec"]["defaultValue"]
    assert load_spec(ROOT / "agents" / "ui-venus-1.5-8b").name in spec_text
    # credentials are never parameters: the spec names Secrets, it holds no keys
    assert not any("secret_access" in p.lower() or "password" in p.lower() for p in params)


def test_the_spec_parameter_is_one_line_that_reads_back_as_the_same_spec() -> None:
    spec = load_spec(ROOT / "agents" / "ui-venus-1.5-8b")
    spec = spec.model_copy(update={"description": 'two\nlines: "quoted" # not a comment'})
    text = spec_text(spec)
    assert "\n" not in text  # kfp copies defaults into the IR's comment header
    assert spec_from_dict(yaml.safe_load(text)) == spec


def _executors(ir: dict[str, Any]) -> dict[str, Any]:
    return ir["deploymentSpec"]["executors"]


def test_images_and_resources_come_from_platform(compiled: dict[str, tuple[str, dict[str, Any]]]) -> None:
    ex = _executors(compiled["ui-venus-1.5-8b"][1])
    train, base = "registry.example.com/venus/train-gpu:0.1.0", "registry.example.com/venus/base:0.1.0"
    assert ex["exec-score-data"]["container"]["image"] == base
    assert ex["exec-merge"]["container"]["image"] == base
    assert ex["exec-mid-train"]["container"]["image"] == train
    assert ex["exec-offline-rl-3"]["container"]["image"] == train
    assert ex["exec-evaluate"]["container"]["image"] == train  # it asks for a GPU
    res = ex["exec-mid-train"]["container"]["resources"]
    assert (res["accelerator"]["resourceCount"], res["accelerator"]["resourceType"]) == ("8", "nvidia.com/gpu")
    assert res["resourceCpuLimit"] == "64" and res["resourceMemoryLimit"] == "900Gi"
    assert "accelerator" not in ex["exec-merge"]["container"]["resources"]
    assert ex["exec-score-data"]["container"]["env"] == [
        {"name": "MLFLOW_S3_ENDPOINT_URL", "value": "http://minio.venus.svc:9000"},
        {"name": "AWS_ENDPOINT_URL", "value": "http://minio.venus.svc:9000"}]


def test_kubernetes_settings_per_stage(compiled: dict[str, tuple[str, dict[str, Any]]]) -> None:
    k8s = compiled["ui-venus-1.5-8b"][1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    mid = k8s["exec-mid-train"]
    assert mid["emptyDirMounts"] == [{"medium": "Memory", "mountPath": "/dev/shm", "sizeLimit": "64Gi",
                                      "volumeName": "dshm"}]
    assert mid["nodeSelector"]["labels"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert mid["tolerations"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
    assert mid["pvcMount"][0]["mountPath"] == "/checkpoints" and mid["pvcMount"][0]["constant"] == "venus-checkpoints"
    assert "pvcMount" not in k8s["exec-merge"]
    # model.base is s3://: the stages that load it (mid_train, evaluate's `base` row) cache it on the PVC
    assert k8s["exec-evaluate"]["pvcMount"][0]["mountPath"] == "/checkpoints"
    env = {s: {e["name"]: e["value"] for e in _executors(compiled["ui-venus-1.5-8b"][1])[s]["container"]["env"]}
           for s in ("exec-mid-train", "exec-evaluate", "exec-offline-rl", "exec-merge")}
    assert env["exec-mid-train"]["VENUS_MODEL_CACHE"] == env["exec-evaluate"]["VENUS_MODEL_CACHE"] == "/checkpoints/models"
    assert "VENUS_MODEL_CACHE" not in env["exec-offline-rl"] and "VENUS_MODEL_CACHE" not in env["exec-merge"]
    secrets = {s["secretName"]: s for s in k8s["exec-score-data"]["secretAsEnv"]}
    assert [e["envVar"] for e in secrets["venus-minio"]["keyToEnv"]] == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
    assert secrets["venus-mlflow"]["optional"] is True
    run_id = [{"fieldPath": "metadata.labels['pipeline/runid']", "name": "KFP_RUN_ID"}]
    assert all(ex["fieldPathAsEnv"] == run_id for ex in k8s.values())  # MLflow nesting, per-run checkpoints
    # the tiny agent keeps artifacts on local disk: no storage Secret to mount, no PVC, no GPUs
    tiny = compiled["venus-tiny"][1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert all(ex == {"fieldPathAsEnv": run_id} for ex in tiny.values())


def test_a_disabled_domain_has_no_task_and_is_left_out_of_the_merge(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "agents" / "venus-tiny", ["offline_rl.web.enabled=false"])
    tasks = _tasks(_compile(spec, tmp_path))
    assert "offline-rl-3" not in tasks
    assert sorted(tasks["merge"]["inputs"]["artifacts"]) == ["base", "grounding", "mobile"]


def _online_spec() -> Any:
    from venus_core.config import registry

    env = registry("envs").names()[0]
    return load_spec(ROOT / "agents" / "venus-tiny", ["online_rl.enabled=true", f"online_rl.envs=[{env}]"])


def test_specs_the_pipeline_cannot_build_are_named() -> None:
    with pytest.raises(PipelineError, match="mid_train.enabled"):
        build_pipeline(load_spec(ROOT / "agents" / "venus-tiny", ["mid_train.enabled=false"]))
    off = [f"offline_rl.{d}.enabled=false" for d in ("grounding", "mobile", "web")]
    with pytest.raises(PipelineError, match="every domain is disabled"):
        build_pipeline(load_spec(ROOT / "agents" / "venus-tiny", off))


def test_online_rl_sits_between_the_navigation_specialists_and_merge(tmp_path: Path) -> None:
    spec = _online_spec()
    tasks = _tasks(_compile(spec, tmp_path))
    online = {t["inputs"]["parameters"]["domain"]["runtimeValue"]["constant"]: n
              for n, t in tasks.items() if "online-rl" in n}
    assert sorted(online) == ["mobile", "web"]
    merge_in = tasks["merge"]["inputs"]["artifacts"]
    assert merge_in["mobile"]["taskOutputArtifact"]["producerTask"] == online["mobile"]
    assert merge_in["grounding"]["taskOutputArtifact"]["producerTask"] == "offline-rl"
    assert tasks[online["web"]]["inputs"]["artifacts"]["base"]["taskOutputArtifact"]["producerTask"] == "offline-rl-3"


def test_the_production_online_rl_pods_reach_their_rollout_servers(
        compiled: dict[str, tuple[str, dict[str, Any]]]) -> None:
    """ui-venus-1.5-8b runs online RL on vLLM rollout servers: its online_rl pods mount the
    checkpoints PVC (the weights the servers read) and carry the label the servers' NetworkPolicy
    admits; no other pod carries it."""
    from pipelines.k8s import ROLLOUT_CLIENT_LABEL

    ir = compiled["ui-venus-1.5-8b"][1]
    tasks = _tasks(ir)
    online = sorted(n for n in tasks if n.startswith("online-rl"))
    assert [tasks[n]["inputs"]["parameters"]["domain"]["runtimeValue"]["constant"] for n in online] == ["mobile", "web"]
    k8s = ir["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    key, value = ROLLOUT_CLIENT_LABEL
    for name, ex in k8s.items():
        labels = ex.get("podMetadata", {}).get("labels", {})
        if name.startswith("exec-online-rl"):
            assert labels.get(key) == value and ex["pvcMount"][0]["mountPath"] == "/checkpoints"
        else:
            assert key not in labels, name


def test_one_rollout_server_for_both_domains_is_refused() -> None:
    shared = "online_rl.rollout_server=http://vllm-rollout.venus.svc:8000/v1"
    spec = load_spec(ROOT / "agents" / "ui-venus-1.5-8b", [shared])
    with pytest.raises(PipelineError, match=r"one server per domain with '\{domain\}'"):
        build_pipeline(spec)


def test_components_are_lightweight_on_the_given_image() -> None:
    comp = components.component("merge", "example/image:1")
    container = comp.pipeline_spec.deployment_spec["executors"]["exec-merge"]["container"]
    assert container["image"] == "example/image:1"
    assert "pip install" not in " ".join(container["command"])  # the image carries kfp and the project
    assert "venus_core.runtime.merge" in " ".join(container["command"])
    assert comp.description and "TIES" in comp.description
    online = components.component("online_rl", "example/image:1")
    assert "venus_core.runtime.launch" in " ".join(
        online.pipeline_spec.deployment_spec["executors"]["exec-online-rl"]["container"]["command"])
    with pytest.raises(KeyError, match="no component for job 'nope'"):
        components.component("nope", "x")


def test_the_pipeline_root_is_the_specs_s3_artifact_store(compiled: dict[str, tuple[str, dict[str, Any]]],
                                                          tmp_path: Path) -> None:
    assert compiled["ui-venus-1.5-8b"][1]["defaultPipelineRoot"] == "s3://venus-artifacts/ui-venus-1.5-8b"
    assert "defaultPipelineRoot" not in compiled["venus-tiny"][1]  # file://: KFP's default store (kfp.local: its own)
    spec = load_spec(ROOT / "agents" / "venus-tiny", ["platform.artifact_store=s3://bucket/prefix/"])
    assert _compile(spec, tmp_path)["defaultPipelineRoot"] == "s3://bucket/prefix"


def _described(defs: dict[str, Any]) -> dict[str, str]:
    """name -> description of every parameter and artifact in an IR input/output definition."""
    items = {**defs.get("parameters", {}), **defs.get("artifacts", {})}
    return {name: (d.get("description") or "").strip() for name, d in items.items()}


def _documented(func: Any) -> set[str]:
    import inspect

    import docstring_parser

    doc = inspect.getdoc(func) or ""
    # as kfp reads it: `Args:` for inputs, `Returns:` (parsed as a second `Args:`) for outputs
    parsed = (docstring_parser.parse(doc), docstring_parser.parse(doc.replace("Returns:", "Args:")))
    return {p.arg_name for d in parsed for p in d.params}


@pytest.mark.parametrize("agent", AGENTS)
def test_every_pipeline_parameter_has_a_description(agent: str,
                                                    compiled: dict[str, tuple[str, dict[str, Any]]]) -> None:
    """The root's input descriptions come from the pipeline function's `Args:` (kfp drops, silently,
    a name the signature lacks, so the docstring must name exactly the parameters)."""
    import inspect

    params = compiled[agent][1]["root"]["inputDefinitions"]["parameters"]
    assert {n: d for n, d in _described({"parameters": params}).items() if len(d) < 10} == {}
    func = build_pipeline(load_spec(ROOT / "agents" / agent)).pipeline_func
    assert _documented(func) == set(inspect.signature(func).parameters) == set(params)


@pytest.mark.parametrize("agent", AGENTS)
def test_every_component_input_and_output_has_a_description(
        agent: str, compiled: dict[str, tuple[str, dict[str, Any]]]) -> None:
    comps = compiled[agent][1]["components"]
    shipped = [j for j in components.FUNCTIONS if j != "generate_data"]  # off in both specs: tested above
    assert {f"comp-{j.replace('_', '-')}" for j in shipped} <= set(comps)  # every job of the pipeline is in the IR
    missing = {name: [n for n, d in {**_described(c.get("inputDefinitions", {})),
                                     **_described(c.get("outputDefinitions", {}))}.items() if len(d) < 10]
               for name, c in comps.items()}
    assert {k: v for k, v in missing.items() if v} == {}


@pytest.mark.parametrize("job", list(components.FUNCTIONS))
def test_each_component_docstring_names_exactly_its_inputs_and_outputs(job: str) -> None:
    import inspect

    func = components.FUNCTIONS[job]
    assert _documented(func) == set(inspect.signature(func).parameters)
    spec = components.component(job, "x").component_spec
    for name, io in {**spec.inputs, **spec.outputs}.items():
        assert io.description, f"{job}.{name} has no description in the component spec"
    assert 20 <= len(components.summary(job)) <= 160 and "\n" not in components.summary(job)


def test_the_pipeline_description_lists_each_stage_with_its_component_summary(
        compiled: dict[str, tuple[str, dict[str, Any]]], tmp_path: Path) -> None:
    """The IR has no field for a component's description, so the pipeline's (which the Kubeflow UI
    shows) carries one line per stage."""
    description = compiled["venus-tiny"][1]["pipelineInfo"]["description"]
    spec = load_spec(ROOT / "agents" / "venus-tiny")
    assert description.startswith(spec.description + "\n\nStages:\n")
    assert [line.split(":", 1)[0] for line in description.split("Stages:\n", 1)[1].splitlines()] == [
        f"- {job}" for job in ("score_data", "mid_train", "offline_rl", "online_rl", "merge", "evaluate")]
    for job in components.FUNCTIONS:
        if job != "generate_data":  # flywheel.enabled only (test_the_flywheel_option_runs_generate_data_before_score_data)
            assert f"- {job}: {components.summary(job)}" in description
    off = load_spec(ROOT / "agents" / "venus-tiny", ["online_rl.enabled=false"])
    assert "- online_rl:" not in _compile(off, tmp_path)["pipelineInfo"]["description"]


def test_every_stage_outputs_metrics_and_evaluate_an_html_report(
        compiled: dict[str, tuple[str, dict[str, Any]]]) -> None:
    comps = compiled["ui-venus-1.5-8b"][1]["components"]
    for job in (j for j in components.FUNCTIONS if j != "generate_data"):  # generate_data: the flywheel test
        outputs = comps[f"comp-{job.replace('_', '-')}"]["outputDefinitions"]["artifacts"]
        assert outputs["metrics"]["artifactType"]["schemaTitle"] == "system.Metrics", job
    assert comps["comp-evaluate"]["outputDefinitions"]["artifacts"]["report"]["artifactType"]["schemaTitle"] \
        == "system.HTML"


def test_pods_that_lease_devices_get_the_registry_the_client_certificate_and_the_label(tmp_path: Path) -> None:
    """ui-venus-1.5-8b leases its web domain's browsers from the cluster's registry: only online_rl's web
    pod gets $VENUS_DEVICE_REGISTRY, the client-certificate Secret as files with VENUS_DAAS_* at them and
    the device-client label; a registry serving both domains adds the mobile pod, and generate_data when
    the flywheel runs; `device_service: local` or no registry leaves every pod without them."""
    from pipelines.k8s import DEVICE_CLIENT_LABEL, DEVICE_CLIENT_MOUNT

    def leasing(overrides: list[str]) -> dict[str, dict[str, Any]]:
        ir = _compile(load_spec(ROOT / "agents" / "ui-venus-1.5-8b", overrides), tmp_path)
        out = {}
        for name, ex in ir["platforms"]["kubernetes"]["deploymentSpec"]["executors"].items():
            labels = ex.get("podMetadata", {}).get("labels", {})
            volumes = ex.get("secretAsVolume", [])
            if DEVICE_CLIENT_LABEL[0] in labels or volumes:
                out[name] = {"label": labels.get(DEVICE_CLIENT_LABEL[0]), "volumes": volumes}
        return out

    def env(overrides: list[str], task: str) -> dict[str, str]:
        ir = _compile(load_spec(ROOT / "agents" / "ui-venus-1.5-8b", overrides), tmp_path)
        executor = ir["deploymentSpec"]["executors"][task]["container"]
        return {e["name"]: e["value"] for e in executor.get("env", [])}

    tasks = _tasks(_compile(load_spec(ROOT / "agents" / "ui-venus-1.5-8b"), tmp_path))
    web = next(tasks[n]["componentRef"]["name"].replace("comp-", "exec-") for n in tasks if n.startswith("online-rl")
               and tasks[n]["inputs"]["parameters"]["domain"]["runtimeValue"]["constant"] == "web")
    got = leasing([])
    assert list(got) == [web], got
    assert got[web]["label"] == DEVICE_CLIENT_LABEL[1]
    (volume,) = got[web]["volumes"]
    assert volume["secretName"] == "venus-device-client" and volume["mountPath"] == DEVICE_CLIENT_MOUNT
    variables = env([], web)
    assert variables["VENUS_DEVICE_REGISTRY"] == "https://device-gateway.venus.svc.cluster.local:7070"
    assert {k: variables[k] for k in ("VENUS_DAAS_CA", "VENUS_DAAS_CERT", "VENUS_DAAS_KEY")} == {
        "VENUS_DAAS_CA": f"{DEVICE_CLIENT_MOUNT}/ca.crt", "VENUS_DAAS_CERT": f"{DEVICE_CLIENT_MOUNT}/tls.crt",
        "VENUS_DAAS_KEY": f"{DEVICE_CLIENT_MOUNT}/tls.key"}
    both = leasing(["platform.device_domains=[mobile, web]", "flywheel.enabled=true", "flywheel.env=miniwob"])
    assert sorted(both) == sorted([*(n for n in leasing(["platform.device_domains=[mobile, web]"])), "exec-generate-data"])
    assert len([n for n in both if n.startswith("exec-online-rl")]) == 2
    assert leasing(["online_rl.device_service=local"]) == {}
    assert leasing(["platform.device_registry=null"]) == {}
    assert "VENUS_DEVICE_REGISTRY" not in env(["platform.device_registry=null"], web)
    with pytest.raises(Exception, match="device_registry"):
        load_spec(ROOT / "agents" / "ui-venus-1.5-8b", ["platform.device_registry=device-gateway:7070"])
