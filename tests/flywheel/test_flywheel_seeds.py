"""Seed prompts: files (JSONL / YAML, fail closed naming the entry), templates, the task pool's seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from venus_core.flywheel.seeds import Seed, common_template, load_seeds, pool_seeds
from venus_core.rl.online import sim_phone_tasks


def test_a_jsonl_and_a_yaml_seeds_file_load_and_bad_entries_are_named(tmp_path: Path) -> None:
    good = tmp_path / "seeds.jsonl"
    good.write_text(json.dumps({"app": "board", "level": 1, "prompt": "Click the <colour> button"}) + "\n\n"
                    + json.dumps({"app": "board", "level": 0, "prompt": "Click the red button",
                                  "examples": ["Click the red button"]}) + "\n")
    seeds = load_seeds(good)
    assert [(s.key, s.level, s.examples) for s in seeds] == [
        ("sim-phone:board:level=1:0", 1, ()), ("sim-phone:board:level=0:1", 0, ("Click the red button",))]
    yaml_file = tmp_path / "seeds.yaml"
    yaml_file.write_text("- {app: board, level: 1, prompt: 'Click the <c> button'}\n")
    assert load_seeds(yaml_file)[0].prompt == "Click the <c> button"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"app": "board", "level": 1, "prompt": "x"}) + "\n"
                   + json.dumps({"app": "board", "level": "1", "prompt": "x", "colour": "red"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl line 2: .*level.*colour"):
        load_seeds(bad)
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="broken.jsonl line 1: not JSON"):
        load_seeds(tmp_path / "broken.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no seeds"):
        load_seeds(tmp_path / "empty.jsonl")


def test_templates_match_their_instances_only() -> None:
    seed = Seed("k", "sim-phone", "board", 1, "Click the <colour> button")
    assert seed.matches("Click the green button") and seed.matches("click  the Dark Blue button")
    assert not seed.matches("Click the green button twice") and not seed.matches("Open the Settings app")
    assert Seed("k", "sim-phone", "board", 1, "Click the red button").matches("click the red button")
    assert common_template(["Click the red button", "Click the blue button"]) == "Click the <...> button"
    assert common_template(["Open the Settings app", "Turn on Wi-Fi"]) == "<...>"
    assert common_template(["Same goal", "Same goal"]) == "Same goal"


def test_pool_seeds_are_one_per_level_and_app_of_the_static_tasks() -> None:
    tasks = sim_phone_tasks([0, 1, 2], range(12), size=(128, 128))
    seeds = pool_seeds(tasks)
    assert [(s.key, s.prompt) for s in seeds] == [
        ("sim-phone:board:level=0", "Click the <...> button"), ("sim-phone:board:level=1", "Click the <...> button"),
        ("sim-phone:board:level=2", "Click the <...> button")]
    assert all(1 <= len(s.examples) <= 3 for s in seeds)
    assert all(any(s.matches(t.task.goal) for s in seeds if s.level == t.task.difficulty) for t in tasks)


def test_miniwob_entries_name_the_task_and_have_no_level(tmp_path: Path) -> None:
    web = tmp_path / "web.jsonl"
    web.write_text(json.dumps({"env": "miniwob", "app": "click-button", "prompt": "Click on the <...> button."}) + "\n")
    (seed,) = load_seeds(web)
    assert (seed.key, seed.env, seed.app, seed.level) == ("miniwob:click-button:0", "miniwob", "click-button", 0)
    for entry, why in [({"env": "miniwob", "app": "click-button", "level": 2, "prompt": "x"}, "no curriculum level"),
                       ({"app": "board", "prompt": "x"}, "needs its curriculum level"),
                       ({"env": "android", "app": "x", "level": 0, "prompt": "x"}, "env")]:
        web.write_text(json.dumps(entry) + "\n")
        with pytest.raises(ValueError, match=f"web.jsonl line 1: .*{why}"):
            load_seeds(web)


def test_the_spec_checks_the_web_fields() -> None:
    from venus_core.config.flywheel import FlywheelSpec

    # the phones' field is not used on the web
    assert FlywheelSpec(env="miniwob", candidates_per_round=40000).web_candidates_per_round == 48
    with pytest.raises(ValueError, match="web_candidates_per_round = 140000 passes the training seeds"):
        FlywheelSpec(env="miniwob", rounds=3, first_seed=20000, web_candidates_per_round=40000)
    with pytest.raises(ValueError, match="lists a task twice"):
        FlywheelSpec(web_tasks=["click-button", "click-button"])
