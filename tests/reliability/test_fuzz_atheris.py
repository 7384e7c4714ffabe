"""Coverage-guided fuzzing (atheris) of the text parsers, one process per target (atheris_targets.py).

Each target starts from a seed corpus of real inputs (canonical actions and navigation answers,
grounding points, a judge completion, the venus-tiny spec, a token's claims) and runs the budget's
number of libFuzzer executions (`-atheris_runs`): 300 in the default suite, VENUS_FUZZ_LONG_EXAMPLES
(10,000) in the `fuzz_long` job. A crash (an exception other than the target's documented errors)
ends the process with a non-zero status and the input in its output. Skipped where atheris does
not install (it ships wheels for Linux x86_64 only).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fuzz_helpers import BUDGETS, Budget

pytest.importorskip("atheris")

HERE = Path(__file__).resolve().parent
SPEC = HERE.parents[1] / "agents" / "venus-tiny" / "agent.yaml"
SEEDS: dict[str, list[bytes]] = {
    "action": [b"Click(box=(500,300))", b"Type(content='it\\'s 7')", b"Scroll(start=(1,2),end=(3,4),direction='up')",
               b"Hotkey(keys=('ctrl','c'))", b"Launch(url='https://example.com')", b"Click(500, 300)"],
    "navigation": [b"<think>open it</think><action>Click(box=(10,20))</action><conclusion>done</conclusion>"],
    "point": [b"[500,300]", b"[-1,-1]", b"(1,2,3,4)", b"the answer is [1,2],[3,4]"],
    "judge": [json.dumps({"choices": [{"index": 0, "message": {"content": json.dumps(
        {"alignment": 7, "reachability": 5, "rationale": "ok", "proposal": {"instruction": "x"}})}}]}).encode()],
    "spec": [SPEC.read_bytes()],
    "token": [json.dumps({"lease": "L", "device": "d", "client": "c", "group": "g", "exp": 1.0}).encode()],
}


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("target", sorted(SEEDS))
def test_atheris(target: str, budget: Budget, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, seed in enumerate(SEEDS[target]):
        (corpus / f"seed-{i}").write_bytes(seed)
    seed_flag = [f"-seed={os.environ['VENUS_FUZZ_SEED']}"] if budget.long and os.environ.get("VENUS_FUZZ_SEED") else []
    proc = subprocess.run(
        [sys.executable, str(HERE / "atheris_targets.py"), target, str(corpus), f"-atheris_runs={budget.examples}",
         "-max_len=4096", "-rss_limit_mb=2048", *seed_flag],
        capture_output=True, text=True, timeout=3000, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    done = re.search(r"Done (\d+) in (\d+) second", proc.stderr)
    assert done and int(done.group(1)) >= budget.examples, proc.stderr[-2000:]
    report = os.environ.get("VENUS_FUZZ_REPORT")
    if report:
        cov = re.findall(r"cov: (\d+)", proc.stderr)
        with open(report, "a", encoding="utf-8") as f:
            f.write(json.dumps({"target": f"atheris {target}", "budget": budget.name, "examples": int(done.group(1)),
                                "inputs": int(done.group(1)), "outcomes": {"crashes": 0},
                                "coverage_edges": int(cov[-1]) if cov else None,
                                "seconds": int(done.group(2))}) + "\n")
