from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from venus_core.config.spec import ModelSpec, TinyModelSpec
from venus_core.train import base
from venus_core.train.bootstrap import DEFAULT_STAGES, reuse_stage_data, scaled, with_steps

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


def _steps(*first: int) -> list[int]:
    """Step counts for the first stages of DEFAULT_STAGES, the later ones skipped."""
    return list(first) + [0] * (len(DEFAULT_STAGES) - len(first))


def test_stage_plans() -> None:
    assert [s.level for s in DEFAULT_STAGES] == [0, 0] + [1] * 7 + [2] * 8
    assert [s.kind for s in DEFAULT_STAGES] == ["grounding"] * 4 + ["navigation"] * 5 + ["grounding"] * 3 + ["navigation"] * 5
    assert [s.coarse_grid for s in DEFAULT_STAGES] == [4] + [0] * 16  # coarse-to-fine on level 0
    assert DEFAULT_STAGES[4].steps >= 600 and DEFAULT_STAGES[12].steps >= 600  # fewer did not teach the action format
    assert all(s.head > 0 and s.replay > 0 for s in DEFAULT_STAGES[2:])  # instruction head and replay above level 0
    assert all(s.lr > 0 for s in DEFAULT_STAGES)  # independent of the spec's mid_train.lr (venus-tiny: 5e-4)
    # per level, the format stage without attention supervision, then stages with it on fresh episodes
    assert [s.attend > 0 for s in DEFAULT_STAGES] == [False] * 5 + [True] * 4 + [False] * 4 + [True] * 4
    for st in (*DEFAULT_STAGES[5:9], *DEFAULT_STAGES[13:]):
        assert st.seed not in (0, 1001, 1002) and (st.extra[0].level, st.extra[0].n) == (0, 2000)
    assert len({st.seed for st in DEFAULT_STAGES[13:]}) == 4  # fresh level-2 episodes in every stage
    # the last stage of each level shows the model MiniWoB++ pages of the level-0/1 web tasks (oracle episodes)
    assert DEFAULT_STAGES[8].extra[-1].miniwob == ("click-test", "click-test-2", "click-color")
    for st in DEFAULT_STAGES[13:]:  # and at level 2 recovery episodes (a missed first click, then the click)
        web = [(e.n, e.miniwob, e.misses) for e in st.extra if e.miniwob]
        assert web == [(300, ("click-test", "click-test-2", "click-color"), 0),
                       (150, ("click-test", "click-test-2", "click-color"), 1)]
    # the level-1 consolidation stages keep navigation rows in every batch (a grounding-only stage
    # destroyed the navigation format) and give grounding a growing share
    shares = [(s.mixture.grounding, s.mixture.navigation) for s in DEFAULT_STAGES[6:9] if s.mixture]
    assert shares == [(0.6, 0.4), (0.9, 0.1), (0.5, 0.5)]
    # level 2's consolidation stages likewise (90 % grounding rows, half the learning rate)
    assert [(s.mixture.grounding, s.mixture.navigation, s.lr) for s in DEFAULT_STAGES[15:] if s.mixture] == [
        (0.9, 0.1, 5e-4)] * 2
    # level 2: the vision tower reads the labels beside every stage, three runs of the grounding schedule
    assert all(s.read > 0 for s in DEFAULT_STAGES[9:]) and not any(s.read for s in DEFAULT_STAGES[:9])
    assert DEFAULT_STAGES[9] == DEFAULT_STAGES[10] == DEFAULT_STAGES[11] and DEFAULT_STAGES[9].refusal == 0.3
    half = scaled(DEFAULT_STAGES, 0.5)
    assert [s.steps for s in half] == [round(s.steps / 2) for s in DEFAULT_STAGES]
    assert [s.n for s in scaled(DEFAULT_STAGES, 3.0)] == [s.n for s in DEFAULT_STAGES]  # data never grows
    assert [e.n for e in half[8].extra] == [1000, 150] and [e.n for e in scaled(DEFAULT_STAGES, 3.0)[8].extra] == [2000, 300]
    assert [s.coarse_grid for s in scaled(DEFAULT_STAGES, 0.5)] == [s.coarse_grid for s in DEFAULT_STAGES]
    plan = with_steps(DEFAULT_STAGES, _steps(3, 0, 5, 0, 2))
    assert [(s.level, s.kind, s.steps, s.coarse_grid) for s in plan if s.steps] == [
        (0, "grounding", 3, 4), (1, "grounding", 5, 0), (1, "navigation", 2, 0)]
    assert [s.kind for s in plan] == [s.kind for s in DEFAULT_STAGES]  # skipped stages keep their index
    with pytest.raises(ValueError):
        with_steps(DEFAULT_STAGES, [1, 2])
    with pytest.raises(ValueError):
        with_steps(DEFAULT_STAGES, [0] * len(DEFAULT_STAGES))
    with pytest.raises(ValueError):
        scaled(DEFAULT_STAGES, 0)


def test_base_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert base.resolve_base(ModelSpec(base="tiny"), tmp_path) == "tiny"
    assert base.resolve_base(ModelSpec(base=str(tmp_path)), tmp_path) == tmp_path
    with pytest.raises(FileNotFoundError, match="no such local directory"):
        base.resolve_base(ModelSpec(base=str(tmp_path / "nope")), tmp_path)
    monkeypatch.setattr(base, "BOOTSTRAP_DIR", tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="venus bootstrap"):
        base.resolve_base(ModelSpec(base="bootstrap"), tmp_path)


def test_shipped_bootstrap_matches_the_default_screen_size() -> None:
    if not (base.BOOTSTRAP_DIR / "config.json").is_file():
        pytest.skip("no shipped bootstrap checkpoint")
    assert base.resolve_base(ModelSpec(base="bootstrap"), "/unused") == base.BOOTSTRAP_DIR
    with pytest.raises(ValueError, match="image_size"):
        base.resolve_base(ModelSpec(base="bootstrap", tiny=TinyModelSpec(image_size=256)), "/unused")
    size = sum(f.stat().st_size for f in base.BOOTSTRAP_DIR.iterdir())
    assert size < 10 * 2**20


@pytest.mark.slow
def test_bootstrap_command_writes_a_loadable_checkpoint(tmp_path: Path) -> None:
    from venus_core.cli.train_cmd import register
    from venus_core.models.loading import load_model

    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps `bootstrap` a named sub-command
    out = tmp_path / "boot"
    res = CliRunner().invoke(app, ["bootstrap", "--out", str(out), "--spec", str(SPEC), "--scale", "0.001",
                                   "--steps", ",".join(map(str, _steps(1, 1, 0, 0, 1))), "--eval-limit", "1"])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "bootstrap_report.json").read_text())
    assert [s["level"] for s in report["stages"]] == [0, 0, 1] and all(s["steps"] == 1 for s in report["stages"])
    assert [s["kind"] for s in report["stages"]] == ["grounding", "grounding", "navigation"]
    assert [s["coarse_grid"] for s in report["stages"]] == [4, 0, 0]
    assert [s["index"] for s in report["stages"]] == [0, 1, 4]  # seeds and checkpoint dirs of one full run
    assert [s["index"] for s in report["skipped"]] == [2, 3] + list(range(5, len(DEFAULT_STAGES)))
    # a skipped grounding stage's data is made only for the replay of a later trained stage
    made = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "boot.work").glob("level*-*-*"))
    assert made == ["level0-grounding", "level1-grounding", "level1-navigation"]
    # the level-1 navigation stage replays level 0 and the (skipped) level-1 grounding stages' records
    assert report["stages"][2]["replayed"] > 0
    assert report["stages"][2]["head"] == 1.0 and report["stages"][0]["head"] == 0.0
    assert all(s["refusals_held_back"] >= 0 for s in report["stages"])
    load_model(out, ModelSpec())
    again = CliRunner().invoke(app, ["bootstrap", "--out", str(out), "--spec", str(SPEC)])
    assert again.exit_code != 0 and "not empty" in again.output


def test_coarse_targets_snap_training_grounding_targets_only() -> None:
    from PIL import Image

    from venus_core.data import GroundingSample
    from venus_core.data.schema import Provenance
    from venus_core.train.data import CoarseItem, Corpus, Item, coarse_targets

    class Reader:
        def open_image(self, ref: str) -> Image.Image:
            return Image.new("RGB", (64, 64), "white")

    def rec(i: int, box: tuple[int, int, int, int] | None) -> GroundingSample:
        return GroundingSample(kind="grounding", id=f"g{i}", domain="grounding", image="sha256:" + "0" * 64,
                               image_size=(64, 64), platform="mobile", instruction="the button", box=box,
                               refusal=box is None, provenance=Provenance(source="t", source_id=str(i)))

    reader = Reader()
    train = [Item(rec(0, (100, 600, 300, 900)), reader), Item(rec(1, None), reader),
             Item(rec(2, (990, 0, 1000, 10)), reader)]  # type: ignore[arg-type]
    held = [Item(rec(3, (100, 600, 300, 900)), reader)]  # type: ignore[arg-type]
    base = Corpus(train={"grounding": train}, held_out={"grounding": held}, sources=["x"])
    kept, none_back = coarse_targets(base, 4, keep_refusals=True)
    assert none_back == 0 and all(isinstance(i, CoarseItem) for i in kept.train["grounding"])
    # centre (200, 750) -> cell (0, 3) of 250 units -> (125, 875); refusal unchanged; edge stays in the last cell
    assert [i.example().target for i in kept.train["grounding"]] == ["[125,875]", "[-1,-1]", "[875,125]"]
    corpus, held_back = coarse_targets(base, 4)
    assert held_back == 1  # the refusal waits for the exact stage, and is counted
    assert [i.example().target for i in corpus.train["grounding"]] == ["[125,875]", "[875,125]"]
    assert corpus.held_out["grounding"][0].example().target == "[200,750]"  # held-out keeps exact boxes
    assert corpus.sources == ["x"]
    with pytest.raises(ValueError, match="coarse grid"):
        coarse_targets(corpus, 1)
    with pytest.raises(ValueError, match="no training records left"):
        coarse_targets(Corpus(train={"grounding": [train[1]]}, held_out={}, sources=[]), 4)


def test_replay_adds_the_lower_levels_share_seeded_and_counted() -> None:
    from venus_core.train.bootstrap import with_replay
    from venus_core.train.data import Corpus

    own = Corpus(train={"grounding": [f"l1-{i}" for i in range(80)]}, held_out={"grounding": ["h"]}, sources=["l1"])
    pool = [f"l0-{i}" for i in range(30)]
    out, n = with_replay(own, pool, 0.2, seed=3)
    assert n == 20 and len(out.train["grounding"]) == 100
    added = out.train["grounding"][80:]
    assert len(set(added)) == 20 and set(added) <= set(pool)  # without replacement while the pool lasts
    assert out.held_out == own.held_out and own.train["grounding"] == [f"l1-{i}" for i in range(80)]
    assert with_replay(own, pool, 0.2, seed=3)[0].train == out.train  # seeded
    assert with_replay(own, pool, 0.2, seed=4)[0].train != out.train
    big, n = with_replay(own, pool, 0.5, seed=0)  # 80 records wanted from a pool of 30: every one, then again
    assert n == 80 and {x: big.train["grounding"].count(x) for x in pool} == {x: big.train["grounding"][80:].count(x) for x in pool}
    assert min(big.train["grounding"][80:].count(x) for x in pool) >= 2
    assert with_replay(own, [], 0.2, seed=0) == (own, 0) and with_replay(own, pool, 0.0, seed=0) == (own, 0)
    with pytest.raises(ValueError, match="replay share"):
        with_replay(own, pool, 1.0, seed=0)


def test_replay_can_hold_a_share_of_refusals() -> None:
    from types import SimpleNamespace

    from venus_core.data import GroundingSample, Provenance
    from venus_core.train.bootstrap import Stage, is_refusal, with_replay
    from venus_core.train.data import Corpus

    own = Corpus(train={"grounding": [f"l1-{i}" for i in range(70)]}, held_out={}, sources=["l1"])
    pool = [f"ref-{i}" for i in range(5)] + [f"ans-{i}" for i in range(95)]  # 5 % refusals
    refusal = lambda it: it.startswith("ref")  # noqa: E731
    out, n = with_replay(own, pool, 0.3, seed=1, refusals=0.4, refusal=refusal)
    added = out.train["grounding"][70:]
    assert n == 30 and len(added) == 30 and sum(map(refusal, added)) == 12  # 40 % of 30
    assert {x for x in added if refusal(x)} == set(pool[:5])  # the five refusals, each again (the pool is small)
    assert len({x for x in added if not refusal(x)}) == 18  # answerable ones without replacement
    assert with_replay(own, pool, 0.3, seed=1, refusals=0.4, refusal=refusal)[0].train == out.train  # seeded
    # a share the pool cannot give is an error, not a silent fallback
    with pytest.raises(ValueError, match="the pool of 95 holds 0 refusals"):
        with_replay(own, pool[5:], 0.3, seed=1, refusals=0.4, refusal=refusal)
    with pytest.raises(ValueError, match="refusal share must be in"):
        with_replay(own, pool, 0.3, seed=1, refusals=1.5, refusal=refusal)
    # the default predicate: a grounding sample without a box
    def sample(box: tuple[int, int, int, int] | None) -> SimpleNamespace:
        return SimpleNamespace(record=GroundingSample(
            kind="grounding", id="g", domain="grounding", image="sha256:" + "0" * 64, image_size=(64, 64),
            platform="mobile", instruction="the button", box=box, refusal=box is None,
            provenance=Provenance(source="t", source_id="g")))

    assert is_refusal(sample(None)) and not is_refusal(sample((1, 1, 5, 5)))
    assert not is_refusal(SimpleNamespace(record="a navigation step"))
    with pytest.raises(ValueError, match="needs replay > 0"):
        Stage(2, "navigation", 10, 1, replay_refusal=0.3)
    assert Stage(2, "navigation", 10, 1, replay=0.5, replay_refusal=0.3).replay_refusal == 0.3


def test_a_levels_replay_pool_gathers_its_stages_distinct_records() -> None:
    from types import SimpleNamespace

    from venus_core.train.bootstrap import add_to_pool

    def items(*ids: str) -> list[SimpleNamespace]:
        return [SimpleNamespace(record=SimpleNamespace(id=i)) for i in ids]

    pool: dict[int, list[SimpleNamespace]] = {}
    assert add_to_pool(pool, 1, items("a", "b", "c")) == 3
    # a later stage of the level on the same screens plus extras (free boards): only the new ones join
    assert add_to_pool(pool, 1, items("c", "a", "f1", "f2", "f1")) == 2
    assert [it.record.id for it in pool[1]] == ["a", "b", "c", "f1", "f2"]
    assert add_to_pool(pool, 0, items("a")) == 1 and [it.record.id for it in pool[1]][:1] == ["a"]


@pytest.mark.slow
def test_continuing_from_a_stage_checkpoint_trains_what_one_run_would(tmp_path: Path) -> None:
    from venus_core.config.loader import load_spec
    from venus_core.train.bootstrap import bootstrap

    spec = load_spec(SPEC)
    plan = scaled(DEFAULT_STAGES, 0.001)
    one = tmp_path / "one"
    bootstrap(tmp_path / "one-out", spec, work_dir=one, stages=with_steps(plan, _steps(2, 2, 2)), eval_limit=1)
    assert not list(one.glob("level1-navigation-*"))  # a trailing skipped stage synthesises nothing
    again = tmp_path / "again"
    (one / "level9-grounding-8.tmp").mkdir()  # a half-written stage directory is not reused
    # the same synthesised data (deterministic anyway; saves the time); checkpoints are not linked
    linked = reuse_stage_data(again, [one])
    assert linked == sorted(d.name for d in one.glob("level*") if ".tmp" not in d.name) and linked
    assert not list(again.glob("ckpt-*")) and all((again / n).resolve() == (one / n).resolve() for n in linked)
    assert reuse_stage_data(again, [one]) == []  # names already there are left as they are
    with pytest.raises(FileNotFoundError, match="no-such-work"):
        reuse_stage_data(again, [tmp_path / "no-such-work"])
    report = bootstrap(tmp_path / "again-out", spec, work_dir=again, stages=with_steps(plan, _steps(0, 0, 2)),
                       eval_limit=1, init_checkpoint=one / "ckpt-1-level0-grounding" / "step-00000002")
    assert [s["index"] for s in report["stages"]] == [2] and report["stages"][0]["replayed"] > 0
    assert report["earlier"] == []  # a fresh work directory: nothing recorded before
    # continuing in the run's own work directory keeps what its progress file said of the stages skipped now
    recorded = json.loads((one / "bootstrap_progress.json").read_text())["stages"]
    cont = bootstrap(tmp_path / "cont-out", spec, work_dir=one, stages=with_steps(plan, _steps(0, 0, 0, 0, 1)), eval_limit=1,
                     init_checkpoint=one / "ckpt-2-level1-grounding" / "step-00000002")
    assert cont["earlier"] == recorded and [s["index"] for s in cont["stages"]] == [4]
    assert json.loads((one / "bootstrap_progress.json").read_text())["earlier"] == recorded
    first = (one / "ckpt-2-level1-grounding" / "step-00000002" / "model.safetensors").read_bytes()
    assert (again / "ckpt-2-level1-grounding" / "step-00000002" / "model.safetensors").read_bytes() == first


def test_a_stage_refusal_share_reaches_its_own_and_its_extra_grounding_records(tmp_path: Path) -> None:
    from dataclasses import replace

    from venus_core.config.loader import load_spec
    from venus_core.data.store import DatasetReader
    from venus_core.train.bootstrap import Extra, Stage, bootstrap

    spec = load_spec(SPEC)
    skipped = tuple(replace(s, steps=0) for s in scaled(DEFAULT_STAGES[:5], 0.001))
    plan = skipped + (
        Stage(2, "grounding", 40, 1, None, head=1.0, lr=1e-3, refusal=0.5),
        Stage(2, "navigation", 4, 1, None, head=1.0, replay=0.3, lr=1e-3, refusal=0.5,
              extra=(Extra(0, 40, kind="grounding"), Extra(0, 4))),
    )
    work = tmp_path / "work"
    report = bootstrap(tmp_path / "out", spec, work_dir=work, stages=plan, eval_limit=1)
    grounding, navigation = report["stages"]
    assert grounding["refusal_share"] == navigation["refusal_share"] == 0.5
    assert [e["kind"] for e in navigation["extra"]] == ["grounding", "navigation"]
    own = list(DatasetReader(work / "level2-grounding-40-refusal50"))
    extra = list(DatasetReader(work / "extra6.0-level0-grounding-both-40-refusal50"))
    for records in (own, extra):  # 50 % asked, a screen without an absent candidate answers instead
        assert 10 <= sum(r.refusal for r in records) <= 30, sum(r.refusal for r in records)
    assert (work / "extra6.1-level0-navigation-both-4").is_dir()  # navigation records keep their name
    assert navigation["data"]["train"]["grounding"] + navigation["data"]["held_out"].get("grounding", 0) \
        >= 40 + navigation["replayed"]  # the extra grounding records reached the navigation stage's corpus
    with pytest.raises(ValueError, match="Stage.refusal"):
        bootstrap(tmp_path / "bad", spec, work_dir=tmp_path / "bad-work", eval_limit=1,
                  stages=skipped + (Stage(2, "grounding", 4, 1, None, refusal=1.5),))


@pytest.mark.slow
def test_a_stage_trains_on_its_extra_records_synthetic_and_miniwob(tmp_path: Path) -> None:
    import shutil
    from dataclasses import replace

    from venus_core.config.loader import load_spec
    from venus_core.data.store import DatasetReader
    from venus_core.train.bootstrap import Extra, Stage, bootstrap

    if shutil.which("chromium") is None:
        pytest.skip("no chromium (apt-get install chromium chromium-driver)")
    spec = load_spec(SPEC)
    extra = (Extra(0, 8), Extra(1, 8, "web", (160, 210)), Extra(0, 2, "web", miniwob=("click-button",)))
    plan = tuple(replace(s, steps=0) for s in scaled(DEFAULT_STAGES[:5], 0.001)) + (
        Stage(1, "navigation", 8, 1, None, head=1.0, replay=0.3, lr=1e-3, extra=extra, seed=1201),)
    report = bootstrap(tmp_path / "out", spec, work_dir=tmp_path / "work", stages=plan, eval_limit=1)
    (entry,) = report["stages"]
    assert entry["index"] == 5 and [e["records"] for e in entry["extra"]] == [8, 8, 2]
    made = sorted(p.name for p in (tmp_path / "work").glob("extra5.*"))
    assert made == ["extra5.0-level0-navigation-both-8", "extra5.1-level1-navigation-web-160x210-8",
                    "extra5.2-miniwob-click-button-2"]
    assert (tmp_path / "work" / "level1-navigation-8-seed1201").is_dir()  # the stage's own fresh records
    web = list(DatasetReader(tmp_path / "work" / made[1]))
    assert {tuple(r.steps[0].image_size) for r in web} == {(160, 210)} and {r.platform for r in web} == {"web"}
    mw = list(DatasetReader(tmp_path / "work" / made[2]))
    assert len(mw) == 2 and all(r.provenance.source == "miniwob" and r.goal.startswith("Click on the") for r in mw)
    # every record of the stage and its extras reached the corpus (2-step episodes: 8 + 8 + 8 + 2 x 1 step)
    data = entry["data"]
    assert data["train"]["navigation"] + data["held_out"].get("navigation", 0) == 2 * (8 + 8 + 8) + 2, data


def test_a_brief_stage_synthesises_brief_navigation_data_under_its_own_names(tmp_path: Path) -> None:
    """Stage.think="brief": its own and its extras' navigation steps think without the goal, in data
    directories of their own (an earlier goal-style directory of the same stage is never reused);
    grounding records are untouched and keep their names."""
    from dataclasses import replace

    from venus_core.config.loader import load_spec
    from venus_core.data.store import DatasetReader
    from venus_core.train.bootstrap import Extra, Stage, bootstrap

    with pytest.raises(ValueError, match="Stage.think"):
        Stage(1, "navigation", 8, 1, think="long")
    spec = load_spec(SPEC)
    plan = tuple(replace(s, steps=0) for s in scaled(DEFAULT_STAGES[:5], 0.001)) + (
        Stage(1, "navigation", 8, 1, None, head=1.0, replay=0.3, lr=1e-3, seed=1201, think="brief",
              extra=(Extra(3, 4), Extra(3, 4, kind="grounding"))),)
    report = bootstrap(tmp_path / "out", spec, work_dir=tmp_path / "work", stages=plan, eval_limit=1)
    (entry,) = report["stages"]
    assert entry["think"] == "brief"
    work = tmp_path / "work"
    assert sorted(p.name for p in work.glob("extra5.*")) == ["extra5.0-level3-navigation-both-4-brief",
                                                             "extra5.1-level3-grounding-both-4"]
    episodes = [*DatasetReader(work / "level1-navigation-8-seed1201-brief"),
                *DatasetReader(work / "extra5.0-level3-navigation-both-4-brief")]
    assert len(episodes) == 12
    for t in episodes:
        assert all(t.goal not in st.think for st in t.steps), t.goal
    assert not (work / "level1-navigation-8-seed1201").exists()


@pytest.mark.slow
def test_a_reading_stage_and_reading_beside_grounding_train_the_tower(tmp_path: Path) -> None:
    from dataclasses import replace

    from venus_core.config.loader import load_spec
    from venus_core.train.bootstrap import GROUNDING_ONLY, Stage, bootstrap

    spec = load_spec(SPEC)
    plan = tuple(replace(s, steps=0) for s in scaled(DEFAULT_STAGES[:4], 0.001)) + (
        Stage(2, "reading", 2, 2, lr=1e-3),
        Stage(2, "grounding", 8, 2, GROUNDING_ONLY, head=1.0, replay=0.2, lr=1e-3, read=0.5))
    report = bootstrap(tmp_path / "out", spec, work_dir=tmp_path / "work", stages=plan, eval_limit=1)
    reading, grounding = report["stages"]
    assert (reading["index"], reading["kind"], reading["train_screens"], reading["seed"]) == (4, "reading", 4, 3040)
    assert reading["held_out"]["reading/word"]["n"] > 0 and reading["held_out_seed"] == 503040
    assert (tmp_path / "work" / "ckpt-4-level2-reading" / "step-00000002" / "reading_head.safetensors").is_file()
    assert grounding["read"] == 0.5 and grounding["held_out"]["reading/word"]["n"] > 0
    assert "grounding/hit" in grounding["held_out"] and grounding["replayed"] > 0
    assert (tmp_path / "work" / "ckpt-5-level2-grounding" / "step-00000002" / "reading_head.safetensors").is_file()
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_an_extra_off_the_grid_has_its_own_data_directory() -> None:
    from venus_core.train.bootstrap import Extra, _extra_name

    free = Extra(1, 10, kind="grounding", layout="free")
    assert _extra_name(3, 1, "navigation", free, "-refusal30") == "extra3.1-level1-grounding-free-both-10-refusal30"
    # the plan's extras keep the names (and so the data) they had
    assert _extra_name(3, 1, "navigation", Extra(1, 10, kind="grounding"), "-refusal30") == "extra3.1-level1-grounding-both-10-refusal30"
    # a wrong layout fails when the plan is written, not when its stage comes hours later
    with pytest.raises(ValueError, match="Extra.layout must be one of"):
        Extra(1, 10, kind="grounding", layout="scatter")
    with pytest.raises(ValueError, match="not level 0"):
        Extra(0, 10, kind="grounding", layout="free")
    with pytest.raises(ValueError, match="not MiniWoB"):
        Extra(1, 10, layout="free", miniwob=("click-test",))


def test_recovery_extras_name_their_misses() -> None:
    from venus_core.train.bootstrap import Extra, _extra_name

    web = ("click-test", "click-color")
    # one miss keeps the name (and so the data) the shipped plan's recovery episodes have
    assert _extra_name(13, 5, "navigation", Extra(0, 150, "web", miniwob=web, misses=1)) == \
        "extra13.5-miniwob-click-test+click-color-150-miss"
    assert _extra_name(13, 6, "navigation", Extra(0, 150, "web", miniwob=web, misses=2)) == \
        "extra13.6-miniwob-click-test+click-color-150-miss2"
    assert _extra_name(13, 4, "navigation", Extra(0, 300, "web", miniwob=web)) == "extra13.4-miniwob-click-test+click-color-300"
    for bad in (-1, 5):
        with pytest.raises(ValueError, match="Extra.misses must be in"):
            Extra(0, 10, "web", miniwob=web, misses=bad)
    with pytest.raises(ValueError, match="on synthetic records"):
        Extra(0, 10, misses=1)


def test_a_stage_reading_off_the_grid_is_checked_when_the_plan_is_written() -> None:
    from venus_core.train.bootstrap import DEFAULT_STAGES, Stage

    assert all(st.read_layout == "grid" for st in DEFAULT_STAGES)
    assert Stage(2, "grounding", 10, 1, read=1.0, read_layout="mixed").read_layout == "mixed"
    with pytest.raises(ValueError, match="Stage.read_layout must be one of"):
        Stage(2, "grounding", 10, 1, read=1.0, read_layout="scatter")


def test_a_skipped_grounding_stage_brings_its_extras_to_the_replay_pool(tmp_path: Path) -> None:
    from dataclasses import replace

    from venus_core.config.loader import load_spec
    from venus_core.train.bootstrap import Extra, bootstrap

    spec = load_spec(SPEC)
    plan = list(scaled(DEFAULT_STAGES[:5], 0.001))
    plan[3] = replace(plan[3], extra=(Extra(1, 8, kind="grounding", layout="free"),))
    # stages 0-3 skipped (as when continuing from a checkpoint): stage 4 still replays what they trained on,
    # the free boards beside stage 3 included, so they are synthesised even though stage 3 does not train
    report = bootstrap(tmp_path / "out", spec, work_dir=tmp_path / "work", stages=with_steps(tuple(plan), [0, 0, 0, 0, 1]),
                       eval_limit=1)
    assert (tmp_path / "work" / "extra3.0-level1-grounding-free-both-8" / "manifest.json").is_file()
    assert [s["index"] for s in report["stages"]] == [4] and report["stages"][0]["replayed"] > 0
