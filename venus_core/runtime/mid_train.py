"""Runtime job: mid-training (SFT on the domain mixture) of the agent's base model.

    python -m venus_core.runtime.mid_train --spec AGENT --data DIR [--data DIR ...] --out DIR
        [--resume] [--checkpoints DIR] [--set k=v ...]

Runs as one process, or under `torchrun --nproc_per_node N` (DDP). Writes OUT/model (HF checkpoint,
safetensors), OUT/checkpoints or --checkpoints DIR (resumable, atomic; on a cluster a PVC, so a
restarted pod resumes), OUT/metrics.jsonl (also an MLflow run when a store is configured,
runtime.tracking) and
OUT/report.json (provenance, held-out rates with 95 % intervals before and after training, the
mixture actually drawn, data sizes, wall and CPU time). With mid_train.wise_ft < 1 the trained
weights go to OUT/trained and OUT/model is their interpolation toward the weights training started from
(`venus_core.merge.wise_ft`); the report then holds both models' held-out rates.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from venus_core.runtime.common import job_parser, load_job_spec, provenance, write_json_atomic
from venus_core.runtime.tracking import TeeTracker, job_tracking

WISE_FT_START = "start"  # under the checkpoint directory: the weights training started from (wise_ft < 1)

if TYPE_CHECKING:
    from venus_core.config.spec import AgentSpec
    from venus_core.train.data import Corpus
    from venus_core.train.distributed import DistEnv


def main(argv: Sequence[str] | None = None) -> int:
    p = job_parser("mid_train", "Mid-training: SFT on the domain mixture")
    p.add_argument("--data", action="append", required=True, help="Venus dataset directory (repeatable)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    p.add_argument("--checkpoints", default=None, metavar="DIR",
                   help="checkpoint directory (default OUT/checkpoints); when given, a checkpoint already there "
                        "is resumed without --resume (a restarted pod on the same PVC continues where it stopped)")
    p.add_argument("--eval-limit", type=int, default=None, help="held-out samples per domain (default: eval.held_out)")
    p.add_argument("--device", default="auto",
                   help="torch device: auto (the local rank's GPU, else cpu; the GPUs platform.resources.mid_train "
                        "asks for must be there), cpu, cuda, cuda:N")
    p.add_argument("--stop-at", type=int, default=None, help=argparse.SUPPRESS)  # tests: stop after step N, as a kill would
    args = p.parse_args(argv)
    spec = load_job_spec(args)

    import torch

    from venus_core.models.loading import save_model
    from venus_core.models.placement import DeviceError, describe_model, job_device, low_precision_note
    from venus_core.train.base import load_base
    from venus_core.train.data import load_corpus
    from venus_core.train.distributed import setup, teardown
    from venus_core.train.evaluate import rates_to_dict, rates_to_metrics
    from venus_core.train.sft import train_sft
    from venus_core.train.tracker import NullTracker

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_dir = Path(args.checkpoints) if args.checkpoints else out / "checkpoints"
    resume = args.resume or (args.checkpoints is not None and (ckpt_dir / "latest").is_file())
    try:  # the start-up check: the GPUs the spec gives mid_train must be there
        device = job_device(spec, "mid_train", args.device)
    except DeviceError as exc:
        print(f"mid_train: error: {exc}", file=sys.stderr, flush=True)
        return 2
    env = setup(spec.mid_train, device)
    base_uri = spec.model.base
    spec = _local_base(spec, env)  # an s3:// / file:// model.base: fetched to the model cache first
    stack = contextlib.ExitStack()
    finished_ok = False
    try:
        # loaded on this rank's device (its attention kernel); dtype auto = float32 master weights, the
        # compute in bf16 under autocast (mid_train.precision) or DeepSpeed's bf16 engine
        if env.is_main:
            model, processor = load_base(spec.model, out, env.device)
        env.barrier()
        if not env.is_main:
            model, processor = load_base(spec.model, out, env.device)
        if env.is_main:
            placed = describe_model(model)
            print(f"[mid_train] model on {env.device} ({placed['dtype']}, {placed['attn_implementation']}), "
                  f"backend {env.backend}", file=sys.stderr, flush=True)
            if env.backend != "deepspeed":  # DeepSpeed's bf16 optimizer keeps float32 master weights
                low_precision_note(model, spec.mid_train.lr, "mid_train")
        corpus = load_corpus(args.data, validation_fraction=spec.data.validation_fraction,
                             history_len=spec.data.history_len, seed=spec.data.seed)
        tracker = stack.enter_context(job_tracking("mid_train", spec, out)) if env.is_main else NullTracker()
        if resume and env.is_main:
            print(f"[mid_train] resuming from {ckpt_dir / 'latest'}", file=sys.stderr)
        limit = args.eval_limit if args.eval_limit is not None else spec.eval.held_out
        t0 = time.perf_counter()
        before = None
        fresh = not (resume and (ckpt_dir / "latest").is_file())
        start_dir = ckpt_dir / WISE_FT_START
        if env.is_main and spec.mid_train.wise_ft < 1.0 and fresh:
            # the weights training starts from, written as the trained ones will be (same tensor
            # names, dtype, tokenizer files): what the published model is interpolated toward
            if start_dir.exists():
                shutil.rmtree(start_dir)
            save_model(model, processor, start_dir)
        if env.is_main and fresh:
            from venus_core.train.evaluate import evaluate_held_out

            before = rates_to_dict(evaluate_held_out(model, processor, corpus.held_out, limit=limit))
        result = train_sft(model, processor, corpus, spec.data.mixture, spec.mid_train, env,
                           ckpt_dir=ckpt_dir, tracker=tracker, resume=resume,
                           stop_at=args.stop_at, eval_limit=limit)
        from venus_core.train.ds_backend import full_weights

        finished = result.steps >= spec.mid_train.max_steps
        alpha = spec.mid_train.wise_ft
        trained_dir = out / ("trained" if alpha < 1.0 else "model")
        with full_weights(model, result.deepspeed):  # ZeRO-3: every rank helps gather the weights
            if env.is_main and finished:
                save_model(model, processor, trained_dir)
        wise_ft = None
        if env.is_main and finished and alpha < 1.0:
            wise_ft = _publish_wise_ft(spec, out, start_dir, trained_dir, alpha, env.device, corpus, limit)
            tracker.log_metrics(rates_to_metrics(wise_ft["rates"], prefix="wise_ft/"), result.steps)
        if env.is_main and finished:
            after = rates_to_dict(result.rates)
            report = {
                **provenance("mid_train", spec, args.data),
                "base": base_uri,
                "steps": result.steps,
                "world_size": env.world,
                "backend": env.backend,
                "held_out_before": before,
                # the published model's rates; with wise_ft < 1 the trained weights' are held_out_trained
                "held_out_after": rates_to_dict(wise_ft["rates"]) if wise_ft else after,
                **({"held_out_trained": after,
                    "wise_ft": {"alpha": alpha, "base": str(wise_ft["base"]), "trained": "trained"}}
                   if wise_ft else {}),
                "eval_history": result.history,
                "mixture": result.mixture,
                "data": corpus.sizes(),
                "skipped_too_long": result.skipped_too_long,
                "wall_s": round(time.perf_counter() - t0, 1),
                "cpu_s_this_process": round(result.cpu_s, 1),
                "torch_threads": torch.get_num_threads(),
            }
            write_json_atomic(out / "report.json", report)
            tracker.log_artifact(out / "model", "model")
            tracker.log_artifact(out / "report.json", "report.json")
            if isinstance(tracker, TeeTracker):
                tracker.record_provenance(report)
    except BaseException:
        stack.__exit__(*sys.exc_info())
        raise
    else:
        stack.close()
        finished_ok = True
    finally:
        teardown(synchronize=finished_ok)  # every rank got here: meet before leaving
    return 0


def _local_base(spec: AgentSpec, env: DistEnv) -> AgentSpec:
    """`runtime.base_model.localize_base`, one fetch at a time: rank 0 first, then the first rank of
    every other node (whose cache may be its own disk), then the rest (finding it up to date)."""
    from venus_core.runtime.base_model import is_remote, localize_base

    if not is_remote(spec.model.base):
        return spec
    local = spec
    for turn in (env.is_main, not env.is_main and env.local_rank == 0, env.local_rank != 0):
        error: Exception | None = None
        if turn:
            try:
                local = localize_base(spec, "mid_train")
            except Exception as exc:  # noqa: BLE001 - re-raised below, after telling the other ranks
                error = exc
        if not env.all_ok(error is None):  # instead of a barrier, which the failed rank would never reach
            if error is not None:
                raise error
            raise RuntimeError(f"mid_train: rank {env.rank}: model.base {spec.model.base} could not be fetched on "
                               "another rank (its log has the error); stopping")
    return local


def _publish_wise_ft(spec: AgentSpec, out: Path, start: Path, trained: Path, alpha: float, device: Any,
                     corpus: Corpus, limit: int) -> dict[str, Any]:
    """OUT/model = start + alpha * (trained - start), on disk; its held-out rates on the same
    samples as the trained weights'. `start`: the weights training started from, saved by this job
    (a base from a hub differs from a saved checkpoint in dtype and tokenizer files); a run resumed
    from checkpoints of a job that did not save them interpolates toward model.base itself."""
    from venus_core.merge.wise_ft import interpolate
    from venus_core.models.loading import load_model
    from venus_core.train.base import base_checkpoint_dir
    from venus_core.train.evaluate import evaluate_held_out

    base = start if (start / "SHA256SUMS").is_file() else base_checkpoint_dir(spec.model, out)
    published = out / "model"
    if published.exists():  # a resumed job's earlier output: written again from its trained weights
        shutil.rmtree(published)
    t0 = time.perf_counter()
    interpolate(base, trained, published, alpha)
    model, processor = load_model(published, spec.model, device)
    rates = evaluate_held_out(model, processor, corpus.held_out, limit=limit)
    del model
    print(f"[mid_train] wise_ft {alpha}: published {published} = base {base} + {alpha} x (trained - base) "
          f"in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return {"rates": rates, "base": base}


if __name__ == "__main__":
    sys.exit(main())
