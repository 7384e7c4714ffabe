"""Runtime job `offline_rl`: one offline GRPO specialist (grounding, mobile or web) from an SFT checkpoint.

    python -m venus_core.runtime.offline_rl --domain grounding|mobile|web --spec AGENT \
        --model CKPT_DIR (--data DIR [--data DIR] | --data-root SCORE_DATA_OUT) [--exclude DIR] \
        [--eval-data DIR] --out DIR [--checkpoints DIR] [--set k=v]

Data: `--data` datasets as given, or `--data-root`, a score_data output: the scored datasets of
`offline_rl.<domain>.sources` minus every episode of the mixture's validation split (the evaluate
stage's held-out set), or the mixture's train split when `sources` is empty. Measured on the
tiny default: 60 grounding GRPO steps on the mixture's 373 grounding records (levels 0–2 mixed)
did not improve held-out hits (24/93 before; 16, 26, 21 after, three seeds; 14 after 120 steps),
while the same 60 steps on the 1,300 level-0 records went 33.5 % -> 68.5 % (n = 200).

Writes `OUT/model/` (HF checkpoint, LoRA merged), `OUT/metrics.jsonl` (every GRPO step through the
Tracker interface) and `OUT/report.json`: provenance (inputs + sha256, resolved spec, git
revision), held-out metrics before and after with 95 % Wilson intervals, the trainer summary and,
for navigation, the history-alignment / sparse-action statistics (action mix before and after).

Distributed: under torchrun (`offline_rl.distributed`: in the pod, or a TrainJob through
`runtime.launch`) every rank trains on its strided share of each step's groups (DDP or FSDP2,
`venus_core.rl.distributed`); rank 0 evaluates, logs, checkpoints and writes the outputs. Under
FSDP2 every rank joins the gathers of a checkpoint (`train.fsdp2_checkpoint`: whole weights and
optimizer state as safetensors on rank 0) and of the exported model (LoRA merged on rank 0).

Held-out set: `--eval-data` when given; otherwise a seeded split of the training records by
episode (navigation) or record (grounding) of min(`eval.held_out`, 20 %) records. Grounding takes
`GroundingSample` records; mobile / web take `NavigationStep` records and `Trajectory` records
(expanded with `data.history_len`) of that platform. Records of other kinds are counted in the report.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from venus_core.config import AgentSpec
from venus_core.data.schema import GroundingSample, NavigationStep, Trajectory
from venus_core.data.store import DatasetReader
from venus_core.runtime.common import job_parser, load_job_spec, provenance, write_json_atomic
from venus_core.runtime.rl_checkpoint import Checkpointing, StoppedAt
from venus_core.runtime.tracking import job_tracking
from venus_core.train.distributed import disable_gradient_checkpointing
from venus_core.train.tracker import JsonlTracker, NullTracker, Tracker

JOB = "offline_rl"
DOMAINS = ("grounding", "mobile", "web")


class ImageStores:
    """Opens a content-addressed image ref from whichever of several datasets holds it."""

    def __init__(self, readers: Sequence[DatasetReader]) -> None:
        self.readers = list(readers)

    def __call__(self, ref: str):  # type: ignore[no-untyped-def]
        for r in self.readers:
            if r.image_path(ref).is_file():
                return r.open_image(ref)
        raise FileNotFoundError(f"image {ref} is in none of {[str(r.path) for r in self.readers]}")


def load_records(dirs: Sequence[str], domain: str, history_len: int) -> tuple[list[Any], ImageStores, dict[str, int]]:
    """Records of `domain` from every dataset in `dirs`, the image opener, and counts per kind seen."""
    readers = [DatasetReader(d) for d in dirs]
    out: list[Any] = []
    seen: Counter[str] = Counter()
    for reader in readers:
        for rec in reader:
            seen[rec.kind] += 1
            if domain == "grounding":
                if isinstance(rec, GroundingSample):
                    out.append(rec)
            elif rec.kind == "trajectory" and rec.platform == domain:  # type: ignore[union-attr]
                out.extend(rec.to_steps(history_len))  # type: ignore[union-attr]
            elif isinstance(rec, NavigationStep) and rec.platform == domain:
                out.append(rec)
    if not out:
        raise ValueError(f"offline_rl --domain {domain}: no usable records in {list(dirs)} (kinds seen: {dict(seen)})")
    return out, ImageStores(readers), dict(seen)


def _group_key(rec: Any) -> str:
    """Episode id of navigation steps and trajectories, record id otherwise (a split keeps it whole)."""
    return rec.episode_id if isinstance(rec, (NavigationStep, Trajectory)) else rec.id


def resolve_data_root(root: str | Path, spec: AgentSpec, domain: str) -> tuple[list[str], list[str]]:
    """(data dirs, exclude dirs) of a score_data output for this domain's job.

    With `offline_rl.<domain>.sources`: those sources' final (scored) datasets, excluding the
    mixture's validation split (the evaluate stage's held-out set); else the mixture's train split.
    """
    root = Path(root)
    names = getattr(spec.offline_rl, domain).sources
    if not names:
        return [str(root / "mixture" / "train")], []
    report_file = root / "report.json"
    try:
        finals = json.loads(report_file.read_text(encoding="utf-8"))["final_datasets"]
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"--data-root {root}: cannot read final_datasets from {report_file} ({exc}); "
                         "is it a score_data output?") from None
    missing = [n for n in names if n not in finals]
    if missing:
        raise ValueError(f"offline_rl.{domain}.sources {missing}: not in {report_file} final_datasets {sorted(finals)}")
    return [str(root / finals[n]) for n in names], [str(root / "mixture" / "validation")]


def exclude_records(records: list[Any], dirs: Sequence[str]) -> tuple[list[Any], int]:
    """`records` minus those whose episode (or record) id appears in the datasets `dirs`; and the count."""
    if not dirs:
        return records, 0
    keys = {_group_key(rec) for d in dirs for rec in DatasetReader(d)}
    kept = [r for r in records if _group_key(r) not in keys]
    return kept, len(records) - len(kept)


def split_held_out(records: Sequence[Any], n_max: int, seed: int) -> tuple[list[Any], list[Any]]:
    """(train, held-out) by group (episode or record), seeded; held-out ≤ min(n_max, 20 %)."""
    want = min(n_max, len(records) // 5)
    keys = sorted({_group_key(r) for r in records},
                  key=lambda k: hashlib.sha256(f"{seed}:{k}".encode()).hexdigest())
    held: set[str] = set()
    count = Counter(_group_key(r) for r in records)
    total = 0
    for k in keys:
        if total >= want:
            break
        held.add(k)
        total += count[k]
    return [r for r in records if _group_key(r) not in held], [r for r in records if _group_key(r) in held]


def _rates(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v.to_dict() for k, v in d.items()}


def run(spec: AgentSpec, domain: str, model_dir: str, data: Sequence[str], out: Path, *,
        eval_data: Sequence[str] = (), tracker: Tracker | None = None, minibatches: int = 1,
        checkpoints: Path | None = None, stop_at: int | None = None, exclude: Sequence[str] = (),
        device: Any = "auto") -> dict[str, Any]:
    """The job body (also called in process by tests and the pipeline's local runner).

    Under torchrun it is one rank of a distributed run (`offline_rl.distributed`, `train.distributed.
    setup`, `rl.distributed`): every rank loads the model and trains on its share of each step's
    groups; rank 0 alone evaluates, logs, checkpoints and writes the outputs (the other ranks pass
    a `tracker` that drops everything, and get the report back without writing it).

    The model goes on `device` ("auto": the local rank's / first GPU when there is one, else the
    CPU, after checking the GPUs the spec gives `offline_rl` are there: `models.placement`); the
    trainer's reference copy and optimizer state follow it (`OfflineGRPO`).

    With `checkpoints`, the trainer's state (weights, optimizer, RNG, loop position, and for
    navigation the aligned histories and thought pool) is saved there every `save_every` steps
    and at the end, and a run that finds a checkpoint there continues from it exactly.
    `stop_at` (tests) ends training after that many steps, as a kill would, without outputs."""
    from venus_core.models.loading import load_model, save_model
    from venus_core.models.placement import describe_model, job_device, low_precision_note
    from venus_core.rl.grpo import OfflineGRPO
    from venus_core.rl.navigation import NavigationEpochs
    from venus_core.rl.prompts import evaluate_grounding, evaluate_navigation, grounding_item
    from venus_core.train.distributed import setup

    if domain not in DOMAINS:
        raise ValueError(f"--domain must be one of {', '.join(DOMAINS)}, got {domain!r}")
    dspec = getattr(spec.offline_rl, domain)
    if dspec.enabled and not isinstance(device, torch.device):  # main() resolved it already
        device = job_device(spec, JOB, device)  # fails fast when the pod's GPUs are missing
    prov = provenance(JOB, spec, [model_dir, *data, *eval_data, *exclude])
    if not dspec.enabled:
        out.mkdir(parents=True, exist_ok=True)
        report = {"provenance": prov, "domain": domain, "skipped": f"offline_rl.{domain}.enabled is false"}
        write_json_atomic(out / "report.json", report)
        return report
    torch.manual_seed(dspec.seed)
    random.seed(dspec.seed)
    records, opener, kinds = load_records(data, domain, spec.data.history_len)
    records, excluded = exclude_records(records, exclude)
    if not records:
        raise ValueError(f"offline_rl --domain {domain}: every record of {list(data)} is in the excluded {list(exclude)}")
    if eval_data:
        held, eval_opener, _ = load_records(eval_data, domain, spec.data.history_len)
        train = records
        held = held[: spec.eval.held_out]
    else:
        train, held = split_held_out(records, spec.eval.held_out, spec.data.seed)
        eval_opener = opener
    if not held:
        raise ValueError(f"offline_rl: no held-out records (pass --eval-data or more data than {len(records)} records)")
    dist_spec = spec.offline_rl.distributed
    env = setup(dist_spec, device)
    if env.is_main:
        out.mkdir(parents=True, exist_ok=True)
    tracker = tracker or (JsonlTracker(out / "metrics.jsonl") if env.is_main else NullTracker())
    tracker.log_params({"domain": domain, **{f"offline_rl.{domain}.{k}": v for k, v in dspec.model_dump().items()}})
    model, processor = load_model(model_dir, spec.model, env.device, training=True)
    placement = describe_model(model)
    checkpointing = dist_spec.gradient_checkpointing == "on" or (
        dist_spec.gradient_checkpointing == "auto" and env.device.type == "cuda")
    placement.update({"backend": env.backend, "world_size": env.world, "gradient_checkpointing": checkpointing})
    if env.is_main:
        print(f"[{JOB}] model on {placement['device']} ({placement['dtype']}, {placement['attn_implementation']}), "
              f"backend {env.backend} x {env.world}", file=sys.stderr, flush=True)
    placement["precision_note"] = low_precision_note(model, dspec.lr, f"offline_rl.{domain}")

    def evaluate(m: Any) -> dict[str, Any]:
        """Rank 0 decodes the held-out set; the others wait for it. A sharded policy (FSDP2, after
        training starts) is decoded with whole weights by every rank together: transformers'
        generate all-reduces on every token for an FSDP-managed model (`synced_gpus`), so a rank
        decoding alone would wait forever. Only rank 0's rates are kept."""
        together = trainer is not None and env.backend == "fsdp2"
        with trainer.rollout_weights() if trainer is not None else contextlib.nullcontext():
            rates = _evaluate(m) if env.is_main or together else {}
        env.barrier()
        return rates if env.is_main else {}

    def _evaluate(m: Any) -> dict[str, Any]:
        kw = {"repetition_penalty": spec.eval.repetition_penalty, "batch_size": spec.eval.batch_size,
              "max_new_tokens": dspec.max_new_tokens}
        if domain == "grounding":
            return _rates(evaluate_grounding(m, processor, held, eval_opener, **kw))
        return _rates(evaluate_navigation(m, processor, held, eval_opener, **kw))

    trainer: OfflineGRPO | None = None
    t0 = time.perf_counter()
    before = evaluate(model)
    t_eval = time.perf_counter() - t0
    trainer = OfflineGRPO(model, processor, dspec, tracker, minibatches=minibatches, env=env,
                          gradient_checkpointing=checkpointing)
    epochs = NavigationEpochs(train, opener, dspec, tracker) if domain != "grounding" else None
    ckpt = Checkpointing(checkpoints, trainer, epochs, dspec.save_every, stop_at, env=env)
    resume = ckpt.restore()
    nav_stats: dict[str, Any] | None = None
    t1 = time.perf_counter()
    if epochs is None:
        items = [grounding_item(r, opener) for r in train]
        trainer.train(lambda epoch: items, on_step=ckpt.on_step, resume=resume)
    else:
        trainer.train(epochs.items_for_epoch, hook=epochs.hook, on_step=ckpt.on_step, resume=resume,
                      after_epoch=lambda e: epochs.after_epoch(trainer, e))
        nav_stats = epochs.stats
    ckpt.final()
    t_train = time.perf_counter() - t1
    final = trainer.trained_model()
    final.eval()
    if checkpointing:
        disable_gradient_checkpointing(final)
    after = evaluate(final)
    report: dict[str, Any] = {
        "provenance": prov,
        "domain": domain,
        "records": {"train": len(train), "held_out": len(held), "kinds_seen": kinds, "excluded": excluded},
        "data": {"train": list(data), "exclude": list(exclude), "eval": list(eval_data)},
        "held_out_before": before,
        "held_out_after": after,
        "trainer": trainer.summary(),
        "steps": dspec.max_steps,
        "seconds": {"train": round(t_train, 1), "eval_each": round(t_eval, 1)},
        "resumed_from_step": None if resume is None else resume["step"],
        "torch_threads": torch.get_num_threads(),
        "placement": placement,
    }
    if nav_stats is not None:
        report["navigation"] = nav_stats
    exported, weights = trainer.export()  # FSDP2: every rank helps gather the whole weights (LoRA merged)
    if env.is_main:
        save_model(exported, processor, out / "model", state_dict=weights, **{"venus_provenance.json": _json(prov)})
        write_json_atomic(out / "report.json", report)
        tracker.log_artifact(out / "report.json", "report.json")
    env.barrier()
    return report


def _startup_device(spec: AgentSpec, job: str, requested: str, *, enabled: bool = True) -> Any:
    """The job's device, or None after printing why the GPUs the spec asks for are not there
    (the start-up check, before any input is read)."""
    from venus_core.models.placement import DeviceError, job_device

    if not enabled:
        return requested
    try:
        return job_device(spec, job, requested)
    except DeviceError as exc:
        print(f"{job}: error: {exc}", file=sys.stderr, flush=True)
        return None


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False, default=str)


def main(argv: Sequence[str] | None = None) -> int:
    p = job_parser(JOB, "Offline GRPO for one domain, from an SFT checkpoint.")
    p.add_argument("--domain", required=True, choices=DOMAINS)
    p.add_argument("--model", required=True, help="HF checkpoint directory to start from")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", action="append", help="dataset directory (repeatable)")
    src.add_argument("--data-root", metavar="DIR", help="a score_data output: offline_rl.<domain>.sources' scored "
                     "datasets minus the mixture's validation split, or the mixture's train split")
    p.add_argument("--exclude", action="append", default=[], metavar="DIR",
                   help="drop training records whose episode / record id is in this dataset (repeatable)")
    p.add_argument("--eval-data", action="append", default=[], help="held-out dataset directory (repeatable)")
    p.add_argument("--checkpoints", default=None, metavar="DIR",
                   help="checkpoint directory (a PVC on a cluster): saved every save_every steps, resumed when present")
    p.add_argument("--device", default="auto",
                   help="torch device of the model: auto (the local rank's GPU, else cuda:0, else cpu; the GPUs "
                        "platform.resources.offline_rl asks for must be there), cpu, cuda, cuda:N")
    p.add_argument("--stop-at", type=int, default=None, help=argparse.SUPPRESS)  # tests: stop after step N, as a kill would
    args = p.parse_args(argv)
    spec = load_job_spec(args)
    device = _startup_device(spec, JOB, args.device, enabled=getattr(spec.offline_rl, args.domain).enabled)
    if device is None:
        return 2
    out = Path(args.out)
    data, exclude = (args.data, list(args.exclude)) if args.data else resolve_data_root(args.data_root, spec, args.domain)
    exclude = list(dict.fromkeys([*exclude, *args.exclude]))
    from venus_core.train.distributed import teardown

    main_rank = os.environ.get("RANK", "0") in ("", "0")  # torchrun's rank: only rank 0 tracks
    tracking = (job_tracking(JOB, spec, out, section=f"offline_rl.{args.domain}", tags={"venus.domain": args.domain})
                if main_rank else contextlib.nullcontext(NullTracker()))
    with tracking as tracker:
        finished = False
        try:
            report = run(spec, args.domain, args.model, data, out, eval_data=args.eval_data, tracker=tracker,
                         checkpoints=Path(args.checkpoints) if args.checkpoints else None, stop_at=args.stop_at,
                         exclude=exclude, device=device)
            finished = True
        except StoppedAt as stop:
            print(f"offline_rl: stopped after step {stop.step} (--stop-at)", file=sys.stderr)
            return 3
        finally:
            teardown(synchronize=finished)  # every rank got here: meet before leaving
        if main_rank:
            tracker.record_provenance(report["provenance"])
    if not main_rank:
        return 0
    if "skipped" in report:
        print(report["skipped"])
        return 0
    for key in report["held_out_before"]:
        b, a = report["held_out_before"][key], report["held_out_after"][key]
        print(f"{key}: {b['value']:.3f} [{b['ci95_low']:.3f}, {b['ci95_high']:.3f}] -> "
              f"{a['value']:.3f} [{a['ci95_low']:.3f}, {a['ci95_high']:.3f}] (n={a['n']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
