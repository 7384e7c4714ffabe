"""Judge protocol pieces: reply parsing, sample hashing, annotated images, cache, local backend."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest
from PIL import Image

import venus_core.scoring.openai_judge as openai_mod
import venus_core.scoring.overlay as overlay_mod
from venus_core.actions import render_action
import venus_core.scoring.protocol as protocol_mod
from venus_core.config.registry import JUDGES
from venus_core.config.spec import ScoringSpec
from venus_core.data.store import DatasetReader
from venus_core.scoring.cache import JudgementCache
from venus_core.scoring.judges import FunctionJudge, JudgeFailure, make_judge
from venus_core.scoring.local_judge import LocalJudge
from venus_core.scoring.overlay import RED, draw_action, judge_image
from venus_core.scoring.protocol import (
    REBUILD_SYSTEM_PROMPT,
    JudgeReplyError,
    describe,
    judgement_from_dict,
    judgement_to_dict,
    parse_rederived,
    parse_reply,
    rederive_messages,
    rederive_prompt,
    sample_hash,
    step_of,
)
from venus_core.scoring.rules import Judgement


def test_doctests() -> None:
    assert doctest.testmod(overlay_mod).failed == 0 and doctest.testmod(openai_mod).failed == 0
    assert doctest.testmod(protocol_mod).attempted > 0 and doctest.testmod(protocol_mod).failed == 0


def test_episode_verdicts_name_their_wrong_step() -> None:
    reply = '{"alignment": 2, "reachability": 7, "rationale": "step 2 taps the wrong row", "proposal": null, "step": 2}'
    j = parse_reply(reply, "trajectory", "x")
    assert (j.score, j.step) == (2, 2)
    assert judgement_from_dict(judgement_to_dict(j)) == j
    assert parse_reply(reply.replace('"step": 2', '"step": null'), "grounding", "x").step is None
    assert judgement_from_dict({**judgement_to_dict(j), "step": None}).step is None  # entries of prompt v1
    with pytest.raises(JudgeReplyError, match="only whole episodes name a step"):
        parse_reply(reply, "navigation_step", "x")
    with pytest.raises(JudgeReplyError, match="step"):
        parse_reply(reply.replace('"step": 2', '"step": -1'), "trajectory", "x")


def test_rederive_request_is_the_agents_prompt_and_reply(synth_records: list) -> None:
    traj = next(r for r in synth_records if r.kind == "trajectory" and len(r.steps) > 1)
    step = step_of(traj, 1)
    assert (step.step_index, [h.action for h in step.history]) == (1, [traj.steps[0].action])
    messages = rederive_messages(step, "data:image/png;base64,AAAA")
    assert messages[0] == {"role": "system", "content": REBUILD_SYSTEM_PROMPT}
    text = messages[1]["content"][1]["text"]
    assert text == rederive_prompt(step) and traj.goal in text and f"Step 1: <think>" in text
    assert "<conclusion>" in text  # the output format the agent is trained on
    with pytest.raises(ValueError, match="no step 9"):
        step_of(traj, 9)
    ok = parse_rederived(f"<think>t</think><action>{traj.steps[1].action}</action><conclusion>c</conclusion>",
                         traj.platform)
    assert ok.think == "t"
    for bad in ("", "Click(box=(1,2))", "<think>t</think><action>Teleport()</action><conclusion>c</conclusion>"):
        with pytest.raises(JudgeReplyError):
            parse_rederived(bad, traj.platform)


def test_parse_reply_strict() -> None:
    j = parse_reply(
        '```json\n{"alignment": 4, "reachability": 7, "rationale": "r", "proposal": {"goal": "g"}}\n```',
        "trajectory",
        "x",
    )
    assert (j.score, j.proposal, j.rationale) == (4, {"goal": "g"}, ("r",))
    for bad, msg in [
        ("", "empty"),
        ("score: 7", "not one JSON object"),
        ("[1]", "not an object"),
        ('{"alignment": "7", "reachability": 7, "rationale": "r"}', "alignment"),
        ('{"alignment": 7, "reachability": 7, "rationale": "r", "extra": 1}', "extra"),
        ('{"alignment": 7, "reachability": 7, "rationale": "r"} trailing', "not one JSON object"),
        ('{"alignment": 5, "reachability": 7, "rationale": "r", "proposal": {"box": "1"}}', "not allowed"),
    ]:
        with pytest.raises(JudgeReplyError, match=msg):
            parse_reply(bad, "grounding", "x")


def test_sample_hash_and_describe(synth_records: list) -> None:
    a, b = synth_records[0], synth_records[1]
    assert sample_hash(a) == sample_hash(a.model_copy()) != sample_hash(b)
    assert len({describe(r).split("\n")[0] for r in synth_records}) > 1
    traj = next(r for r in synth_records if r.kind == "trajectory")
    assert traj.goal in describe(traj) and "Proposal keys allowed for this sample: goal." in describe(traj)


def test_overlay_draws_on_a_copy() -> None:
    img = Image.new("RGB", (200, 100), (255, 255, 255))
    out = draw_action(img, "Click(box=(500,500))", "mobile", target_box=(0, 0, 100, 100))
    assert img.getpixel((100, 50)) == (255, 255, 255)  # original untouched
    assert out.getpixel((100, 50 - 8)) == RED  # crosshair above the point
    assert out.getpixel((0, 0)) != (255, 255, 255)  # green target box corner
    swipe = draw_action(img, "Scroll(start=(500,800),end=(500,200),direction='up')", "mobile")
    assert swipe.getpixel((100, 50)) == RED


def test_judge_image_per_kind(synth_dir: Path, synth_records: list) -> None:
    reader = DatasetReader(synth_dir)
    for r in synth_records:
        img = judge_image(r, reader.open_image)
        assert img.mode == "RGB"
        if r.kind == "trajectory" and len(r.steps) > 1:
            assert (
                img.width
                > reader.open_image(r.steps[0].image).width
                * min(len(r.steps), 4)
                * 0.9
                * img.height
                / reader.open_image(r.steps[0].image).height
            )


def test_cache_roundtrip(tmp_path: Path) -> None:
    c = JudgementCache(tmp_path / "c.sqlite")
    j = Judgement(5, 6, ("a", "b"), {"goal": "x"}, "openai:m")
    c.put_many([("h1", j)], "openai:m", "v1")
    assert c.get_many(["h1", "h2"], "openai:m", "v1") == {"h1": j}
    assert c.get_many(["h1"], "openai:m", "v2") == {} and c.get_many(["h1"], "local:m", "v1") == {}
    assert (c.hits, c.misses) == (1, 3)
    (tmp_path / "bad.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(ValueError, match="bad.sqlite: not a judgement cache"):
        JudgementCache(tmp_path / "bad.sqlite")


def test_make_judge_rules_is_the_registered_function(synth_records: list) -> None:
    judge = make_judge(ScoringSpec(), open_image=lambda ref: Image.new("RGB", (1, 1)))
    assert isinstance(judge, FunctionJudge)
    assert judge.judge_many(synth_records[:3]) == [JUDGES.get("rules")(r) for r in synth_records[:3]]


def test_local_judge_reads_model_replies(synth_dir: Path, synth_records: list) -> None:
    """The local backend sends the protocol prompt with the annotated image and parses replies."""
    seen: list = []

    def fake_generate(model, processor, chats, max_new_tokens, temperature=0.0, **kw):
        seen.extend(chats)
        return ['{"alignment": 8, "reachability": 9, "rationale": "ok"}', "garbage"][: len(chats)]

    reader = DatasetReader(synth_dir)
    judge = LocalJudge("ckpt", open_image=reader.open_image, model=object(), processor=object(),
                       batch_size=2, generate_fn=fake_generate)
    verdicts = judge.judge_many(synth_records[:2])
    assert isinstance(verdicts[0], Judgement) and verdicts[0].judge == "local:ckpt"
    assert isinstance(verdicts[1], JudgeFailure) and "bad judge reply" in verdicts[1].reason
    content = seen[0][0]["content"]
    assert isinstance(content[0]["image"], Image.Image) and "data-quality judge" in content[1]["text"]
    with pytest.raises(ValueError, match="needs scoring.judge_model"):
        LocalJudge.from_spec(ScoringSpec(judge="local"), open_image=reader.open_image)


def test_local_judge_rederives_from_the_plain_screenshot(synth_dir: Path, synth_records: list) -> None:
    seen: list = []

    def fake_generate(model, processor, chats, max_new_tokens, temperature=0.0, **kw):
        seen.extend(chats)
        return ["<think>go</think><action>Click(box=(10,20))</action><conclusion>done</conclusion>", "no"][: len(chats)]

    reader = DatasetReader(synth_dir)
    traj = next(r for r in synth_records if r.kind == "trajectory" and len(r.steps) > 1)
    judge = LocalJudge("ckpt", open_image=reader.open_image, model=object(), processor=object(),
                       batch_size=2, generate_fn=fake_generate)
    assert judge.can_rederive
    got = judge.rederive_many(traj.to_steps()[:2])
    assert render_action(got[0].action) == "Click(box=(10,20))" and isinstance(got[1], JudgeFailure)
    content = seen[0][0]["content"]
    assert content[0]["image"].tobytes() == reader.open_image(traj.steps[0].image).tobytes()  # no overlay
    assert content[1]["text"].startswith(REBUILD_SYSTEM_PROMPT) and traj.goal in content[1]["text"]


@pytest.mark.slow
def test_local_judge_with_the_tiny_model(tmp_path: Path, synth_dir: Path, synth_records: list) -> None:
    """The whole local path on the untrained tiny model: it answers, its replies are not judgements,
    and each sample becomes a counted JudgeFailure (never a score)."""
    reader = DatasetReader(synth_dir)
    spec = ScoringSpec(judge="local", judge_model="tiny")
    judge = make_judge(spec, open_image=reader.open_image, tiny_dir=tmp_path / "tiny", max_new_tokens=8)
    verdicts = judge.judge_many(synth_records[:2])
    assert judge.calls == 1 and len(verdicts) == 2
    assert all(isinstance(v, JudgeFailure) and v.judge == "local:tiny" for v in verdicts)
