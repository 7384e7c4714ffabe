from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from venus_core.config import AgentSpec, SpecError, dump_spec, load_spec, spec_hash
from venus_core.config.loader import apply_overrides, parse_override, spec_from_dict
from venus_core.config.template import render_template

ROOT = Path(__file__).resolve().parents[2]
AGENTS = sorted(p.parent for p in (ROOT / "agents").glob("*/agent.yaml"))


def test_the_three_agent_specs_exist() -> None:
    names = {p.name for p in AGENTS}
    assert {"_template", "venus-tiny", "ui-venus-1.5-8b"} <= names


@pytest.mark.parametrize("agent", AGENTS, ids=lambda p: p.name)
def test_every_agent_spec_validates(agent: Path) -> None:
    spec = load_spec(agent)
    assert isinstance(spec, AgentSpec)
    # the resolved spec round-trips: dump -> load gives the same spec (and the same hash)
    again = spec_from_dict(yaml.safe_load(dump_spec(spec)))
    assert again == spec and spec_hash(again) == spec_hash(spec)


def test_defaults_follow_the_paper() -> None:
    spec = AgentSpec()
    m = spec.data.mixture
    assert (m.perception, m.vqa, m.grounding, m.navigation) == (0.208, 0.221, 0.248, 0.323)
    assert (spec.scoring.keep_threshold, spec.scoring.rewrite_threshold) == (7, 4)
    assert spec.offline_rl.grounding.kl_coef == 4e-3 and spec.offline_rl.mobile.kl_coef == 1e-3
    assert spec.offline_rl.mobile.freeze_vision and not spec.offline_rl.grounding.freeze_vision
    assert spec.data.history_len == 5 and spec.online_rl.max_steps_per_episode == 30
    assert spec.eval.temperature == 0 and spec.eval.repetition_penalty == 1.05


def test_every_field_has_a_description() -> None:
    from pydantic import BaseModel

    missing = []

    def walk(model: type[BaseModel], path: str) -> None:
        for name, field in model.model_fields.items():
            if not field.description:
                missing.append(f"{path}{name}")
            ann = field.annotation
            for cand in (ann, *getattr(ann, "__args__", ())):
                if isinstance(cand, type) and issubclass(cand, BaseModel):
                    walk(cand, f"{path}{name}.")

    walk(AgentSpec, "")
    assert missing == []


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "agent.yaml"
    p.write_text(text)
    return p


def test_unknown_key_names_file_line_and_field(tmp_path: Path) -> None:
    p = _write(tmp_path, "name: a\nmid_train:\n  lr: 0.1\n  learning_rate: 0.2\n")
    with pytest.raises(SpecError) as err:
        load_spec(p)
    assert f"{p}:4: mid_train.learning_rate: unknown key" in str(err.value)


def test_bad_value_names_the_field(tmp_path: Path) -> None:
    p = _write(tmp_path, "offline_rl:\n  grounding:\n    group_size: 1\n")
    with pytest.raises(SpecError, match=r":3: offline_rl\.grounding\.group_size: Input should be greater"):
        load_spec(p)


def test_unknown_registered_name_lists_known_ones(tmp_path: Path) -> None:
    p = _write(tmp_path, "offline_rl:\n  web:\n    reward: nonsense\n")
    with pytest.raises(SpecError, match=r"unknown rewards name 'nonsense'; known: .*grounding"):
        load_spec(p)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("data:\n  mixture: {perception: 0.5, vqa: 0.5, grounding: 0.5, navigation: 0.5}\n", "sum to 1"),
        ("scoring: {keep_threshold: 3, rewrite_threshold: 5}\n", "rewrite_threshold"),
        ("name: Not_OK\n", "lowercase"),
        ("online_rl: {enabled: true}\n", "at least one env"),
        ("data:\n  sources: [{name: x, kind: dataset}]\n", "needs a uri"),
        ("data:\n  sources: [{name: x, kind: dataset, uri: /d, format: nope}]\n", "unknown format 'nope'"),
        ("data:\n  sources: [{name: x, kind: collect}]\n", "kind=collect needs collect settings"),
        ("data:\n  sources: [{name: x, kind: collect, uri: /d, collect: {tasks: [click-test]}}]\n",
         "kind=collect takes no uri"),
        ("data:\n  sources: [{name: x, kind: synth, collect: {tasks: [click-test]}}]\n",
         "collect settings only apply to kind=collect"),
        ("data:\n  sources: [{name: x, kind: collect, collect: {tasks: []}}]\n", "collect.tasks"),
        ("data:\n  sources: [{name: x, kind: collect, collect: {tasks: [a, a]}}]\n", "lists a task twice"),
        ("data:\n  sources: [{name: x, kind: collect, collect: {tasks: [click-test], n: 10, seed: 99991}}]\n",
         r"page seeds 99991..100000 reach 100000, where online evaluation pages start"),
        ("data:\n  sources: [{name: x, kind: collect, collect: {env: android, tasks: [a]}}]\n", "collect.env"),
        ("merge: {weights: {grounding: 1, desktop: 1}}\n", "unknown specialist"),
        ("model: {min_pixels: 10, max_pixels: 5}\n", "min_pixels"),
        ("platform: {service_account: Venus_Pipeline}\n", "platform.service_account: String should match"),
        ("- a\n- b\n", "must be a YAML mapping"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_invalid_specs(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_spec(_write(tmp_path, text))


def test_missing_file() -> None:
    with pytest.raises(SpecError, match="no such agent spec"):
        load_spec("/nonexistent/agent.yaml")


def test_overrides(tmp_path: Path) -> None:
    p = _write(tmp_path, "name: a\n")
    spec = load_spec(p, ["offline_rl.grounding.lr=1e-6", "mid_train.distributed.zero_stage=3",
                         "merge.lambda=0.5", "description=hello world"])
    assert spec.offline_rl.grounding.lr == 1e-6
    assert spec.mid_train.distributed.zero_stage == 3
    assert spec.merge.lambda_ == 0.5
    assert spec.description == "hello world"


def test_override_into_list_items() -> None:
    data = {"data": {"sources": [{"name": "s", "kind": "synth"}]}}
    apply_overrides(data, ["data.sources.0.synth={n: 5}"])
    assert data["data"]["sources"][0]["synth"] == {"n": 5}
    assert spec_from_dict(data).data.sources[0].synth.n == 5  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("item", "message"),
    [("novalue", "KEY=VALUE"), ("a..b=1", "empty key"), ("data.sources.9.n=1", "out of range"),
     ("data.sources.x.n=1", "list index"), ("name.sub=1", "is a value"),
     ("eval.suites.0.limit=1", "not in the file")],
)
def test_bad_overrides(item: str, message: str) -> None:
    data = {"name": "a", "data": {"sources": [{"name": "s", "kind": "synth"}]}}
    with pytest.raises(SpecError, match=message):
        apply_overrides(data, [item])


def test_override_unknown_key_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="mid_train.lrr: unknown key"):
        load_spec(_write(tmp_path, "name: a\n"), ["mid_train.lrr=1"])


def test_parse_override_values() -> None:
    assert parse_override("a=1e-6") == (["a"], 1e-6)
    assert parse_override("a=true") == (["a"], True)
    assert parse_override("a=[1, 2]") == (["a"], [1, 2])
    assert parse_override("a=") == (["a"], "")


def test_spec_hash_changes_with_content() -> None:
    a, b = AgentSpec(), AgentSpec(description="x")
    assert spec_hash(a) == spec_hash(AgentSpec()) != spec_hash(b)


def test_template_file_is_current() -> None:
    """agents/_template/agent.yaml is generated; refresh with `venus spec template -o ...`."""
    committed = (ROOT / "agents" / "_template" / "agent.yaml").read_text(encoding="utf-8")
    assert committed == render_template()


def test_template_documents_every_field_and_validates() -> None:
    text = render_template()
    assert spec_from_dict(yaml.safe_load(text)) == AgentSpec()
    assert "# w1: weight of the format reward" in text
    assert "  lambda: 1.0" in text


def test_eval_workers_need_a_core_each_on_a_cpu_pod() -> None:
    from venus_core.config.spec import cpu_cores

    assert [cpu_cores(q) for q in ("2", "1.5", "500m", " 4 ")] == [2.0, 1.5, 0.5, 4.0]
    for bad in ("two", "0", "-1", "m"):
        with pytest.raises(ValueError, match="CPU quantity"):
            cpu_cores(bad)
    ok = {"eval": {"workers": 2}, "platform": {"resources": {"evaluate": {"cpu": "2"}}}}
    assert AgentSpec.model_validate(ok).eval.workers == 2
    with pytest.raises(ValueError, match=r"eval.workers \(2\) exceeds the evaluate pod's CPU .*'1' = 1 cores"):
        AgentSpec.model_validate({"eval": {"workers": 2}})
    with pytest.raises(ValueError, match="'1500m' = 1.5 cores"):
        AgentSpec.model_validate({"eval": {"workers": 2}, "platform": {"resources": {"evaluate": {"cpu": "1500m"}}}})
    gpu = {"eval": {"workers": 4}, "platform": {"resources": {"evaluate": {"gpu_type": "H100", "gpu_count": 1}}}}
    assert AgentSpec.model_validate(gpu).eval.workers == 4  # on a GPU: as many as fit its memory


def test_collect_seed_window_is_the_online_training_window() -> None:
    from venus_core.config.spec import TRAINING_SEED_END
    from venus_core.rl.online.sources import TRAIN_SEEDS

    assert (TRAIN_SEEDS.start, TRAIN_SEEDS.stop) == (0, TRAINING_SEED_END)


def test_synth_source_refusal_share_defaults_to_the_generators() -> None:
    from venus_core.config.spec import SynthSourceSpec
    from venus_core.data.synth.generate import REFUSAL_SHARE

    assert SynthSourceSpec().refusal_share == REFUSAL_SHARE  # older specs keep byte-identical datasets
