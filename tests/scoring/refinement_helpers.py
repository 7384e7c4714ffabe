"""A small mixed corpus and a scripted MLLM judge for the refinement tests (keep / rewrite /
rebuild / discard over HTTP, with replies in the formats a served judge returns).

Not a conftest: the tests import the builders by name (tests/scoring is on sys.path when pytest
collects them). The imported source is a real `venus data import androidcontrol` of episodes
written in AndroidControl's JSON export; the judge's fate of each record is planned from the
record (`plan_synthetic`, `IMPORTED_FATES`) and the expected counts are derived from that plan.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from PIL import Image

from venus_core.data.importers import run_import
from venus_core.data.store import DatasetReader
from venus_core.models.openai_client import image_data_url
from venus_core.scoring.overlay import judge_image
from venus_core.scoring.protocol import PROPOSAL_KEYS, REBUILD_SYSTEM_PROMPT, describe
from venus_core.scoring.rules import AnyRecord
from venus_core.scoring.testing_server import Reply, judgement_reply

VAGUE = "(still vague)"  # a rewrite whose re-score stays in 4-6
BAD_REBUILD = "LongPress(box=(10,10))"  # a re-derived action the judge scores low
SYNTH_FATES = ("keep", "rewrite", "rewrite_none", "low", "rewrite_vague")
# goal of each imported episode -> (fate, the step its judgement names, the re-derived answer)
IMPORTED_FATES: dict[str, tuple[str, int | None, str | None]] = {
    "goal 0": ("keep", None, None),
    "goal 1": ("low", 1, "<think>The Settings entry is the target.</think><action>Click(box=(500,500))</action>"
                         "<conclusion>Opened Settings.</conclusion>"),
    "goal 2": ("low", 0, "I would tap the settings icon."),  # not a navigation answer: rejected, retried, failed
    "goal 3": ("rewrite", None, None),
    "goal 4": ("low", None, None),  # no wrong step named: cannot be re-derived
    "goal 5": ("low", 2, f"<think>Hold it.</think><action>{BAD_REBUILD}</action><conclusion>Held.</conclusion>"),
}
EXPECTED_IMPORTED = {"goal 0": "kept", "goal 1": "rebuilt", "goal 2": "discarded", "goal 3": "rewritten",
                     "goal 4": "discarded", "goal 5": "discarded"}
EXPECTED_REASONS = {"goal 2": "rederive_failed", "goal 4": "low_score", "goal 5": "rebuild_scored_low"}
SYNTH_EXPECTED = {"keep": "kept", "rewrite": "rewritten", "rewrite_none": "rebuilt", "low": "rebuilt",
                  "rewrite_vague": "rebuilt"}


def android_source(root: Path, out: Path) -> Path:
    """AndroidControl episodes (JSON export, PNG screenshots) imported into a dataset at `out`."""
    actions = [{"action_type": "click", "x": 30, "y": 60}, {"action_type": "scroll", "direction": "down"},
               {"action_type": "input_text", "text": "wifi"}]
    for eid in range(len(IMPORTED_FATES)):
        shots = []
        for i in range(len(actions) + 1):
            rel = f"shots/{eid}_{i}.png"
            (root / "shots").mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (120, 240), (20 * eid, 40 * i, 90)).save(root / rel)
            shots.append(rel)
        episode = {"episode_id": eid, "goal": f"goal {eid}", "screenshots": shots,
                   "screenshot_widths": [120] * len(shots), "screenshot_heights": [240] * len(shots),
                   "accessibility_trees": [None] * len(shots), "actions": [json.dumps(a) for a in actions],
                   "step_instructions": [f"step {i}" for i in range(len(actions))]}
        (root / f"ep{eid}.json").write_text(json.dumps(episode), encoding="utf-8")
    report = run_import("androidcontrol", root, out)
    assert (report.imported, report.quarantined) == (len(IMPORTED_FATES), 0)
    return out


def plan_synthetic(records: list[AnyRecord]) -> dict[str, str]:
    """record id -> fate, cycling through SYNTH_FATES."""
    return {r.id: SYNTH_FATES[i % len(SYNTH_FATES)] for i, r in enumerate(records)}


class ScriptedJudge:
    """The judge server's responder: verdicts for the planned records, re-derived steps for the
    imported episodes, and 9 (high) for what it has not seen (rewrites, rebuilds) unless marked."""

    def __init__(self, synth_dir: Path | None, imported_dir: Path) -> None:
        """Plans the records of the two datasets (the synthetic one optional); a request is matched
        to its record by the description and the picture it carries, as a judge sees them."""
        self.by_request: dict[tuple[str, str], Reply] = {}
        if synth_dir is not None:
            synth = records(synth_dir)
            plan = plan_synthetic(synth)
            for r in synth:
                self.by_request[self._key(r, synth_dir)] = self._verdict(r, plan[r.id])
        for r in records(imported_dir):
            fate, step, _ = IMPORTED_FATES[r.goal]  # type: ignore[union-attr]
            self.by_request[self._key(r, imported_dir)] = self._verdict(r, fate, step)
        self.seen: Counter[str] = Counter()

    @staticmethod
    def _key(r: AnyRecord, where: Path) -> tuple[str, str]:
        url = image_data_url(judge_image(r, DatasetReader(where).open_image))
        return describe(r), hashlib.sha256(url.encode()).hexdigest()

    @staticmethod
    def _verdict(r: AnyRecord, fate: str, step: int | None = None) -> Reply:
        key = PROPOSAL_KEYS[r.kind][0]
        if fate == "keep":  # fenced, as chat models often answer
            body = json.dumps({"alignment": 9, "reachability": 8, "rationale": "matches", "proposal": None})
            return Reply(content=f"```json\n{body}\n```")
        if fate in ("rewrite", "rewrite_vague"):
            text = f"{getattr(r, key)} {VAGUE if fate == 'rewrite_vague' else '(clear)'}"
            return judgement_reply(5, 8, "the wording is ambiguous", {key: text})
        if fate == "rewrite_none":
            return judgement_reply(6, 9, "ambiguous, no better wording")
        return Reply(content=json.dumps({"alignment": 2, "reachability": 6, "rationale": "wrong target",
                                         "proposal": None, "step": step}))

    def __call__(self, request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        parts = messages[-1]["content"]
        text = next(p["text"] for p in parts if p.get("type") == "text")
        url = next(p["image_url"]["url"] for p in parts if p.get("type") == "image_url")
        if messages[0].get("content") == REBUILD_SYSTEM_PROMPT:
            goal = text.split("### User Task\n", 1)[1].split("\n", 1)[0]
            self.seen[f"rederive {goal}"] += 1
            return Reply(content=IMPORTED_FATES[goal][2] or "")
        planned = self.by_request.get((text, hashlib.sha256(url.encode()).hexdigest()))
        if planned is not None:
            return planned
        if VAGUE in text or BAD_REBUILD in text:
            return judgement_reply(3 if BAD_REBUILD in text else 5, 7, "still doubtful")
        return judgement_reply(9, 9, "fixed")


def expected_counts(synth: list[AnyRecord], imported: list[AnyRecord]) -> dict[str, dict[str, Any]]:
    """Per source: decisions, buckets and requests per purpose that the plan implies."""
    plan = plan_synthetic(synth)
    s = Counter(SYNTH_EXPECTED[f] for f in plan.values())
    fates = Counter(plan.values())
    imp = Counter(EXPECTED_IMPORTED[r.goal] for r in imported)  # type: ignore[union-attr]
    imp_fates = [IMPORTED_FATES[r.goal] for r in imported]  # type: ignore[union-attr]
    rederived = [f for f in imp_fates if f[0] == "low" and f[1] is not None]
    return {
        "synth": {
            "decisions": {d: s[d] for d in ("kept", "rewritten", "rebuilt", "discarded")},
            "buckets": {"keep": fates["keep"], "rewrite": fates["rewrite"] + fates["rewrite_none"]
                        + fates["rewrite_vague"], "low": fates["low"], "failed": 0},
            "requests": {"judge": len(synth), "rescore_rewrite": fates["rewrite"] + fates["rewrite_vague"],
                         "rederive": 0,
                         "rescore_rebuild": fates["rewrite_none"] + fates["low"] + fates["rewrite_vague"]},
            "rebuilt_by": {"synthetic": s["rebuilt"], "rederive": 0},
        },
        "androidcontrol": {
            "decisions": {d: imp[d] for d in ("kept", "rewritten", "rebuilt", "discarded")},
            "buckets": {"keep": sum(f[0] == "keep" for f in imp_fates),
                        "rewrite": sum(f[0] == "rewrite" for f in imp_fates),
                        "low": sum(f[0] == "low" for f in imp_fates), "failed": 0},
            "requests": {"judge": len(imported), "rescore_rewrite": sum(f[0] == "rewrite" for f in imp_fates),
                         "rederive": len(rederived),
                         "rescore_rebuild": sum(f[2] is not None and "<action>" in f[2] for f in rederived)},
            "rebuilt_by": {"synthetic": 0, "rederive": imp["rebuilt"]},
        },
    }


def records(path: Path) -> list[AnyRecord]:
    return list(DatasetReader(path))
