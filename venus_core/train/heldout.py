"""Fixed synthetic held-out sets for learning checks: is a checkpoint above chance, and by how much?

Why: "it learns" must be measured on data the model never trained on, with fixed seeds, and with
intervals. These sets are generated with seeds 9000 + level, which neither `venus bootstrap`
(1000 + level) nor the embedded agent spec (1–4) uses; the synthetic world can still render an
identical screen under two seeds at level 0 (one button of a few colours), so level-0 scores
measure skill only together with levels 1–3.

Chance levels printed next to the rates: the best constant point for grounding (the centre of the
screen, measured on the same set) and, for navigation, the share of the most frequent action type.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import PreTrainedModel, ProcessorMixin

from venus_core.data import GroundingSample, NavigationStep
from venus_core.eval.metrics import Rate, score_grounding
from venus_core.train.data import Item, load_corpus
from venus_core.train.evaluate import evaluate_held_out

HELD_OUT_SEED = 9000


@dataclass(frozen=True)
class HeldOutSet:
    name: str
    kind: str
    level: int
    n: int


DEFAULT_SETS: tuple[HeldOutSet, ...] = (
    HeldOutSet("grounding-l0", "grounding", 0, 100),
    HeldOutSet("grounding-l1", "grounding", 1, 100),
    HeldOutSet("grounding-l2", "grounding", 2, 100),
    HeldOutSet("navigation-l3", "navigation", 3, 40),
)


def build_sets(work_dir: str | Path, sets: tuple[HeldOutSet, ...] = DEFAULT_SETS) -> dict[str, dict[str, list[Item]]]:
    """Synthesise (once) and load every set; all records are held-out items."""
    from venus_core.data.synth import synthesize

    out: dict[str, dict[str, list[Item]]] = {}
    for s in sets:
        path = Path(work_dir) / f"{s.name}-{s.n}"
        if not (path / "manifest.json").is_file():
            synthesize(s.kind, s.n, s.level, HELD_OUT_SEED + s.level, path)  # type: ignore[arg-type]
        corpus = load_corpus([path], validation_fraction=0.0, history_len=5, seed=0)
        out[s.name] = corpus.train
    return out


def chance(items: dict[str, list[Item]]) -> dict[str, Rate]:
    """Baselines of a set: centre point for grounding, most frequent action type for navigation."""
    rates: dict[str, Rate] = {}
    g = [it.record for it in items.get("grounding", []) if isinstance(it.record, GroundingSample) and it.record.box]
    if g:
        rates["grounding/hit"] = Rate(sum(score_grounding("[500,500]", r.box).correct for r in g), len(g))
    n = [it.record for it in items.get("navigation", []) if isinstance(it.record, NavigationStep)]
    if n:
        top = Counter(r.action.split("(")[0] for r in n).most_common(1)[0][1]
        rates["navigation/type"] = Rate(top, len(n))
    return rates


def evaluate_sets(model: PreTrainedModel, processor: ProcessorMixin, sets: dict[str, dict[str, list[Item]]],
                  limit: int = 100) -> dict[str, Any]:
    """{set: {rate name: Rate.to_dict()}} plus the chance baselines under "<set>/chance"."""
    report: dict[str, Any] = {}
    for name, items in sets.items():
        report[name] = {k: r.to_dict() for k, r in evaluate_held_out(model, processor, items, limit=limit).items()}
        report[f"{name}/chance"] = {k: r.to_dict() for k, r in chance(items).items()}
    return report


__all__ = ["DEFAULT_SETS", "HELD_OUT_SEED", "HeldOutSet", "build_sets", "chance", "evaluate_sets", "main"]


def main(argv: list[str] | None = None) -> int:
    """python -m venus_core.train.heldout --model DIR|tiny --work DIR --out FILE [--limit N]"""
    import argparse
    import json
    import time

    import torch

    from venus_core.config.spec import ModelSpec
    from venus_core.models.loading import load_model

    p = argparse.ArgumentParser(prog="python -m venus_core.train.heldout", description=main.__doc__)
    p.add_argument("--model", required=True, help="checkpoint directory, or 'tiny' for the random-init tiny model")
    p.add_argument("--work", required=True, help="directory holding (or receiving) the held-out datasets")
    p.add_argument("--out", required=True, help="JSON report to write")
    p.add_argument("--limit", type=int, default=100, help="samples per set")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    model, proc = load_model(args.model, ModelSpec(), "cpu", tiny_dir=Path(args.work) / "tiny-init")
    report = {"model": args.model, **evaluate_sets(model, proc, build_sets(args.work), args.limit),
              "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - c0, 1)}
    Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
