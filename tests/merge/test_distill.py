"""Multi-teacher on-policy distillation (`merge.method: distill`, venus_core/merge/distill.py).

Real pieces: the tiny Qwen3-VL model (built, not downloaded), three specialists made from it
(language weights perturbed), prompts from the synthetic world, the real sampler and logits path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from merge_helpers import load_dir, tiny_specialist
from venus_core.config import AgentSpec
from venus_core.config.spec import DistillSpec, ModelSpec
from venus_core.merge import MergeConfig
from venus_core.merge.distill import REPORT_FILE, distill, distill_loss, distill_prompts, token_reverse_kl
from venus_core.models.integrity import verify_checkpoint_dir
from venus_core.models.loading import load_model
from venus_core.rl.rollout import sample_groups

NAMES = ("grounding", "mobile", "web")
SMALL = {"steps": 2, "batch_size": 2, "max_new_tokens": 8, "lr": 1e-4,
         "prompts": {"records": 2, "grounding_level": 0, "navigation_level": 0}}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    from venus_core.models.tiny import build_tiny

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("distill")
    base = build_tiny(ModelSpec().tiny, root / "base")
    return base, {n: tiny_specialist(base, root / n, i + 1, scale=0.05) for i, n in enumerate(NAMES)}


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    cfg = DistillSpec.model_validate(SMALL).prompts
    return distill_prompts(cfg, NAMES, tmp_path_factory.mktemp("distill_prompts"), history_len=2)


# --------------------------------------------------------------------------- the loss


def test_token_reverse_kl_is_the_definition_and_ignores_suppressed_tokens() -> None:
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(2, 3, 7, generator=g), torch.randn(2, 3, 7, generator=g)
    s[..., 5] = t[..., 5] = float("-inf")  # a token the sampler may not emit
    keep = [0, 1, 2, 3, 4, 6]
    ps, pt = torch.softmax(s[..., keep], -1), torch.softmax(t[..., keep], -1)
    want = (ps * (ps.log() - pt.log())).sum(-1)
    assert torch.allclose(token_reverse_kl(s, t), want, atol=1e-6)
    assert torch.allclose(token_reverse_kl(s, s), torch.zeros(2, 3), atol=1e-6)
    assert (want > 0).all()
    s.requires_grad_(True)
    token_reverse_kl(s, t).sum().backward()
    assert s.grad is not None and torch.isfinite(s.grad).all()
    with pytest.raises(ValueError, match="same vocabulary"):
        token_reverse_kl(s, t[..., :6])


def test_loss_is_zero_against_itself_and_training_moves_the_student_to_the_teacher(
        ckpts: tuple[Path, dict[str, Path]], prompts: dict[str, object]) -> None:
    base, specialists = ckpts
    student, processor = load_model(base, ModelSpec(), training=True)
    same, _ = load_model(base, ModelSpec())
    teacher, _ = load_model(specialists["grounding"], ModelSpec())
    batch = sample_groups(student, processor, [prompts["grounding"][0]], 1, 8, seed=0)  # type: ignore[index]
    with torch.no_grad():
        assert float(distill_loss(student, same, batch)[0]) < 1e-6
        first, tokens = distill_loss(student, teacher, batch)
    assert float(first) > 1e-3 and tokens == int(batch.completion_mask.sum())
    opt = torch.optim.AdamW(student.parameters(), lr=1e-3)
    student.train()
    for _ in range(4):  # the same prompt and answer: the gradient alone must lower the KL
        loss, _ = distill_loss(student, teacher, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        last = float(distill_loss(student, teacher, batch)[0])
    assert last < 0.5 * float(first), (float(first), last)


# --------------------------------------------------------------------------- the run


def test_distill_writes_a_verified_checkpoint_and_a_report(
        ckpts: tuple[Path, dict[str, Path]], prompts: dict[str, object], tmp_path: Path) -> None:
    base, specialists = ckpts
    cfg = DistillSpec.model_validate(SMALL)
    out = tmp_path / "student"
    report = distill(base, specialists, out, cfg, prompts, model_spec=ModelSpec(), work=tmp_path / "work",  # type: ignore[arg-type]
                     init_merge=MergeConfig(method="ties", weights=[1.0, 1.0, 1.0]))
    assert verify_checkpoint_dir(out, require_manifest=True) is not None
    load_model(out, ModelSpec())  # the loaders accept it
    assert json.loads((out / REPORT_FILE).read_text())["steps"] == report["steps"]
    assert report["init"] == "ties" and report["start"] == str(tmp_path / "work" / "init-ties")
    assert [r["step"] for r in report["steps"]] == [1, 2]
    for row in report["steps"]:
        assert set(row["loss"]) == set(row["tokens"]) == set(row["seconds"]) == set(NAMES)
        assert all(v > 0 for v in row["loss"].values()) and all(0 < n <= 2 * 8 for n in row["tokens"].values())
    assert report["prompts"] == {d: len(prompts[d]) for d in NAMES}  # type: ignore[arg-type]
    assert report["placement"]["student"]["device"] == "cpu" and report["placement"]["student"]["dtype"] == "float32"
    start, trained = load_dir(tmp_path / "work" / "init-ties"), load_dir(out)
    key = "model.language_model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(start[key], trained[key])  # the student was trained
    with pytest.raises(FileExistsError):
        distill(base, specialists, out, cfg, prompts, model_spec=ModelSpec(), work=tmp_path / "work")  # type: ignore[arg-type]


def test_distill_is_seeded(ckpts: tuple[Path, dict[str, Path]], prompts: dict[str, object], tmp_path: Path) -> None:
    base, specialists = ckpts
    cfg = DistillSpec.model_validate({**SMALL, "steps": 1, "batch_size": 1, "init": "base"})
    runs = [distill(base, {"web": specialists["web"]}, tmp_path / f"s{i}", cfg, prompts, model_spec=ModelSpec(),  # type: ignore[arg-type]
                    work=tmp_path / f"w{i}") for i in range(2)]
    assert runs[0]["steps"][0]["loss"] == runs[1]["steps"][0]["loss"] and runs[0]["start"] == str(base)
    a, b = (load_dir(tmp_path / f"s{i}") for i in range(2))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_run_merge_writes_the_distilled_candidate(ckpts: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    from venus_core.runtime.merge import run_merge

    base, specialists = ckpts
    spec = AgentSpec.model_validate({"merge": {"method": "ties", "compare": ["ties", "distill", "best_single"],
                                               "distill": {**SMALL, "steps": 1, "batch_size": 1}}})
    report = run_merge(spec, base, list(specialists), list(specialists.values()), tmp_path / "out", candidates=True,
                       device="cpu")
    target = tmp_path / "out" / "candidates" / "distill"
    assert verify_checkpoint_dir(target, require_manifest=True) is not None
    assert set(report["methods"]) == {"ties", "distill"}
    metrics = report["methods"]["distill"]["metrics"]
    assert {f"{d}/last_kl" for d in NAMES} <= set(metrics) and metrics["tokens"] > 0
    assert report["methods"]["distill"]["path"] == str(target)
    # the student starts from the TIES merge this stage already published, not from a second one
    assert report["methods"]["distill"]["report"]["start"] == str(tmp_path / "out" / "model")
    assert not (tmp_path / "out" / "distill-work" / "init-ties").exists()


def test_run_merge_merges_the_distill_start_when_ties_is_not_a_candidate(
        ckpts: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    from venus_core.runtime.merge import run_merge

    base, specialists = ckpts
    spec = AgentSpec.model_validate({"merge": {"method": "distill", "compare": ["distill", "linear"],
                                               "distill": {**SMALL, "steps": 1, "batch_size": 1}}})
    report = run_merge(spec, base, list(specialists), list(specialists.values()), tmp_path / "out", candidates=True,
                       device="cpu")
    assert list(report["methods"]) == ["linear", "distill"]  # tensor merges first
    start = tmp_path / "out" / "distill-work" / "init-ties"
    assert report["methods"]["distill"]["report"]["start"] == str(start)
    assert verify_checkpoint_dir(start, require_manifest=True) is not None
    assert verify_checkpoint_dir(tmp_path / "out" / "model", require_manifest=True) is not None


# --------------------------------------------------------------------------- the spec


def test_spec_accepts_distill_as_method_and_candidate() -> None:
    spec = AgentSpec.model_validate({"merge": {"method": "distill", "compare": ["ties", "linear", "distill", "best_single"],
                                               "distill": {"steps": 3, "prompts": {"seed": 4242}}}})
    assert spec.merge.method == "distill" and spec.merge.distill.steps == 3
    assert spec.merge.distill.prompts.domain_seed("web") == 4244


@pytest.mark.parametrize(("merge", "message"), [
    ({"method": "distil"}, "known: .*distill"),
    ({"compare": ["ties", "distil"]}, "unknown candidate 'distil'; known: .*distill"),
    ({"distill": {"steps": 0}}, "steps"),
    ({"distill": {"lr": 0}}, "lr"),
    ({"distill": {"temperature": -1}}, "temperature"),
    ({"distill": {"init": "linear"}}, "init"),
    ({"distill": {"prompts": {"source": "dataset"}}}, "source=dataset needs data"),
    ({"distill": {"prompts": {"data": "/d"}}}, "source=synth takes no data"),
    ({"distill": {"prompts": {"seed": 699999}}}, r"mobile prompts' seed 700000 lies in eval.held_out_suites.seed_range"),
])
def test_spec_rejects_bad_distill_settings(merge: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AgentSpec.model_validate({"merge": merge})


def test_distill_prompt_seeds_are_their_own() -> None:
    sources = [{"name": "s", "kind": "synth", "synth": {"seed": 5001}}]
    with pytest.raises(ValueError, match="mobile prompts' seed 5001 is data source 's'"):
        AgentSpec.model_validate({"data": {"sources": sources}})
    AgentSpec.model_validate({"data": {"sources": sources}, "merge": {"distill": {"prompts": {"seed": 6000}}}})
    AgentSpec.model_validate({"merge": {"distill": {"prompts": {"source": "dataset", "data": "/d", "seed": 700000}}}})
