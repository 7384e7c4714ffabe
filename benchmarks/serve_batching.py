"""`venus serve` throughput: requests/s with request batching vs one request per `generate` call.

Why: the server is what evaluation, the data judge and rollouts call when they run against an
OpenAI-compatible endpoint on a laptop or in CI; whether batching concurrent requests pays decides
its default `--max-batch`. Both servers serve the same shipped tiny checkpoint (`bootstrap`, or
`--model tiny` for the random-init build) on loopback with one torch thread; the client sends the
same `--n` grounding chats (distinct synthetic screens, greedy, repetition penalty 1.05) with
`--concurrency` parallel requests through the project's OpenAI client. Answers must be identical
in both runs (greedy decoding does not depend on the batch), which the script checks. One warm-up
request per server; `--repeats` interleaved runs of each; prints the best and median requests/s,
the batch-size histogram and the ratios. Client and server share one process (and its GIL), as
in the tests; a separate client process would let the server fill its batches more easily.

    .venv/bin/python benchmarks/serve_batching.py [--n 48] [--concurrency 8] [--max-batch 8] [--max-new-tokens 16]
        [--batch-wait-ms 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from venus_core.config import AgentSpec
from venus_core.models.loading import load_model
from venus_core.models.openai_client import ChatClient
from venus_core.models.prompts import build_messages, grounding_prompt
from venus_core.models.server import BackgroundServer, create_app, transformers_runner
from venus_core.train.base import BOOTSTRAP_DIR


def chats(n: int, size: int) -> list[list[dict[str, Any]]]:
    out = []
    for i in range(n):
        img = Image.new("RGB", (size, size), (240, 240, 240))
        x, y = (37 * i) % (size - 24), (53 * i) % (size - 16)
        img.paste((200, 40 + 5 * i % 200, 40), (x, y, x + 24, y + 16))
        out.append(build_messages(img, grounding_prompt(f"the button number {i}")))
    return out


def run(model: Any, processor: Any, batch: list[list[dict[str, Any]]], max_batch: int, concurrency: int,
        max_new_tokens: int, wait_ms: float) -> tuple[float, list[str], dict[str, Any]]:
    app = create_app(transformers_runner(model, processor), "bench", max_batch=max_batch, batch_wait_ms=wait_ms)
    with BackgroundServer(app) as srv:
        client = ChatClient(srv.base_url, "bench", concurrency=concurrency, timeout_s=600)
        client.generate(batch[:1], max_new_tokens)  # warm-up
        start = time.perf_counter()
        answers = client.generate(batch, max_new_tokens)
        elapsed = time.perf_counter() - start
        stats = app.state.batcher.stats.to_dict()
    return elapsed, answers, stats


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="bootstrap", help="bootstrap (shipped tiny checkpoint), tiny, or a directory")
    p.add_argument("--n", type=int, default=48, help="requests per run")
    p.add_argument("--concurrency", type=int, default=8, help="parallel client requests")
    p.add_argument("--max-batch", type=int, default=8, help="batched server's --max-batch")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3, help="runs of each server (interleaved)")
    p.add_argument("--batch-wait-ms", type=float, default=5.0, help="batched server's --batch-wait-ms")
    args = p.parse_args()
    torch.set_num_threads(1)
    spec = AgentSpec().model
    with tempfile.TemporaryDirectory() as tmp:
        target = BOOTSTRAP_DIR if args.model == "bootstrap" else args.model
        model, processor = load_model(target, spec, tiny_dir=Path(tmp) / "tiny")
        size = spec.tiny.image_size
        batch = chats(args.n, size)
        t1s, tbs = [], []
        for _ in range(args.repeats):  # interleaved, so a load spike on this shared machine hits both
            t1, a1, s1 = run(model, processor, batch, 1, args.concurrency, args.max_new_tokens, 0.0)
            tb, ab, sb = run(model, processor, batch, args.max_batch, args.concurrency, args.max_new_tokens,
                             args.batch_wait_ms)
            if a1 != ab:
                print("error: batched and unbatched servers gave different greedy answers", file=sys.stderr)
                return 1
            t1s.append(t1)
            tbs.append(tb)
    print(f"venus serve, model {args.model}, {args.n} requests, {args.concurrency} in parallel, "
          f"{args.max_new_tokens} new tokens max, {size}px screens, 1 torch thread; "
          f"requests/s best / median of {args.repeats}")
    for label, times, stats in (("unbatched (--max-batch 1)", t1s, s1),
                                (f"batched (--max-batch {args.max_batch}, --batch-wait-ms {args.batch_wait_ms:g})",
                                 tbs, sb)):
        print(f"  {label:<45} {args.n / min(times):6.2f} / {args.n / statistics.median(times):6.2f}"
              f"  (last run's batch sizes {stats['batch_sizes']})")
    print(f"  ratio (best): {min(t1s) / min(tbs):.2f}x   ratio (median): "
          f"{statistics.median(t1s) / statistics.median(tbs):.2f}x")
    print("command: .venv/bin/python benchmarks/serve_batching.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
