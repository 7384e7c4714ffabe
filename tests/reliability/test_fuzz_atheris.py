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
import resource
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


RSS_BUDGET_MB = 2048
"""What a target may use beyond what it starts with (the targets themselves start at ~340 MB)."""


def rss_limit_mb() -> int:
    """libFuzzer's -rss_limit_mb for a target started from this process. libFuzzer reads the peak RSS
    (getrusage), and Linux keeps a process's peak across fork and exec: a target started from a pytest
    worker that once held 2.6 GB reports 2.6 GB before its first input and is stopped as out of memory
    (a flake of the suite under load, where the worker's peak depends on the test files it ran
    before). The limit is that inherited peak plus the target's own budget."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 + RSS_BUDGET_MB


def test_the_rss_limit_counts_the_peak_a_child_inherits() -> None:
    held = bytearray(300 * 1024 * 1024)
    held[::4096] = b"\x01" * len(held[::4096])  # touch every page
    limit = rss_limit_mb()
    del held
    child = subprocess.run([sys.executable, "-c", "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                           capture_output=True, text=True, check=True)
    inherited_mb = int(child.stdout) // 1024
    assert inherited_mb >= 300 and limit - inherited_mb >= RSS_BUDGET_MB - 1


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
         "-max_len=4096", f"-rss_limit_mb={rss_limit_mb()}", *seed_flag],
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
