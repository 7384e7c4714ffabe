"""The openai expander against a scripted OpenAI-compatible server over HTTP: the seeds and the
verified tasks of earlier rounds reach the prompt as in-context examples, goals are instantiated on
the sim phone or rejected as infeasible with the reason, unparseable replies are retried and a
request that keeps failing is counted, and the cost (calls, tokens) is the server's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from flywheel_helpers import BOARD_SEEDS, PositionalPolicy, run_flywheel, space

from venus_core.config.flywheel import FlywheelSpec
from venus_core.flywheel.expanders import make_expander
from venus_core.flywheel.openai_expander import ExpansionReplyError, parse_tasks
from venus_core.scoring.testing_server import Reply, ScriptedChatServer


def _writer(request: dict[str, Any]) -> Reply:
    """Writes the verified goals back when the prompt has any (else the seed's examples), plus a
    goal the phone cannot set up; on level 0 it first answers once with prose."""
    prompt = request["messages"][1]["content"]
    n = int(re.search(r"Write (\d+) new", prompt).group(1))  # type: ignore[union-attr]
    verified = prompt.split("checker verified (write tasks like these):\n", 1)
    pool = re.findall(r"^- (.+)$", verified[1] if len(verified) > 1 else prompt, re.M)
    goals = [pool[i % len(pool)] for i in range(n - 1)] + ["Click the magenta button"]
    return Reply(content=json.dumps({"tasks": [{"goal": g} for g in goals]}))


def test_verified_tasks_become_the_next_rounds_in_context_examples(tmp_path: Path) -> None:
    sp = space(per_round=96)
    seeds = [s.__class__(s.key, s.env, s.app, s.level, s.prompt, ("Click the green button", "Click the red button"))
             for s in BOARD_SEEDS]
    spec = FlywheelSpec(expander="openai", expander_endpoint="http://127.0.0.1:1/v1", expander_model="writer")
    with ScriptedChatServer([Reply(content="Sure! Here are some tasks."), Reply(status=503)], default=_writer) as server:
        spec = spec.model_copy(update={"expander_endpoint": server.base_url})
        expander = make_expander(spec, space=sp, backoff_s=0.0)
        summary, fw = run_flywheel(tmp_path, PositionalPolicy(), expander=expander, sp=sp, seeds=seeds, rounds=2,
                                   tasks=12)
        prompts = [r["messages"][1]["content"] for r in server.requests]
        usage = dict(server.usage_sent)
    r0, r1 = summary["rounds"]
    # round 0: 2 seeds -> 2 requests, the first retried twice (prose, then HTTP 503); round 1: 2 more
    assert r0["expander"]["calls"] == 4 and r1["expander"]["calls"] == 2 and len(prompts) == 6
    assert r0["expander"]["failures"] == 0
    cost = expander.cost()
    assert (cost.prompt_tokens, cost.completion_tokens) == (usage["prompt_tokens"], usage["completion_tokens"])
    assert all("checker verified" not in p for p in prompts[:4])
    verified0 = {x["goal"] for x in map(json.loads, (tmp_path / "tasks.jsonl").read_text().splitlines())
                 if x["round"] == 0 and x["status"] == "verified"}
    assert verified0
    for p in prompts[4:]:
        assert "checker verified" in p and set(re.findall(r"^- (.+)$", p.split("checker verified", 1)[1], re.M)) \
            <= verified0
    lines = [json.loads(x) for x in (tmp_path / "tasks.jsonl").read_text().splitlines()]
    for r, row in enumerate((r0, r1)):  # one magenta goal per request: no board has that colour
        magenta = [x for x in lines if x["round"] == r and "magenta" in x["goal"]]
        assert [x["status"] for x in magenta] == ["infeasible", "duplicate"]  # the second: same goal, no start state
        assert row["infeasible"] == 1 and "no start state" in row["infeasible_reasons"][0][0]
        assert row["proposed"] == 12 and row["executed"] + row["lost"] == row["feasible"]
    assert fw.feedback and all(e.round in (0, 1) for e in fw.feedback)


def test_a_request_that_keeps_failing_is_counted_and_the_round_goes_on(tmp_path: Path) -> None:
    sp = space(per_round=32)
    spec = FlywheelSpec(expander="openai", expander_endpoint="http://x/v1", expander_model="w")
    with ScriptedChatServer(default=lambda r: Reply(content='{"tasks": []}')) as server:
        expander = make_expander(spec.model_copy(update={"expander_endpoint": server.base_url}), space=sp,
                                 backoff_s=0.0, max_retries=1)
        summary, _ = run_flywheel(tmp_path, PositionalPolicy(), expander=expander, sp=sp, rounds=1, tasks=4)
    row = summary["rounds"][0]
    assert row["proposed"] == 0 and row["expander"]["calls"] == 4 and row["expander"]["failures"] == 2
    assert "gave up after 2 attempts" in row["expander"]["failure_reasons"][0]
    assert row["success"]["n"] == 0


def test_replies_are_parsed_strictly() -> None:
    assert parse_tasks('{"tasks": [{"goal": " Click  the red button "}, {"goal": "b"}]}', 1) == ["Click the red button"]
    for bad in ('not json', '{"tasks": []}', '{"tasks": [{"goal": ""}]}', '{"tasks": [{"name": "x"}]}', '[1]'):
        with pytest.raises(ExpansionReplyError):
            parse_tasks(bad, 3)
