"""`venus serve`: expose a model over the OpenAI-compatible chat-completions API (transformers).

    venus serve --model M [--name NAME] [--host 127.0.0.1] [--port 8000] [--max-batch 8]
                [--batch-wait-ms 5] [--spec agent.yaml --set model.dtype=float32 ...]
                [--allow-load-weights] [--return-tokens-as-token-ids]
                [--dev-mode] [--worker-extension-cls pkg.mod.Class]

The model goes on `--device` (default auto: the local rank's GPU, else cuda:0, else the CPU;
`models.placement`), in the spec's dtype (auto: bf16 on a GPU) and attention kernel.
`--model` is a Hugging Face checkpoint directory (Qwen2.5-VL / Qwen3-VL / Qwen3-VL-MoE), `bootstrap`
(the shipped pre-trained tiny checkpoint) or `tiny` (the randomly initialised tiny default, built
into `--tiny-dir`). The served model id is `--name` (default: `tiny`, `bootstrap` or the directory
name); clients such as `venus eval grounding --base-url http://HOST:PORT/v1 --model NAME` use it.
The laptop / CI stand-in for a vLLM server (see `venus_core.models.server`): replies carry `usage`,
and `n`, `stream` (Server-Sent Events) and `logprobs` / `top_logprobs` work as in the OpenAI API, so
the official `openai` client and RL rollouts (which need per-token logprobs) can use it; RL rollouts
(`rl.online.policy_http.ServerPolicy`) also send vLLM's `return_tokens_as_token_ids` (the flag makes
it the default, as in vLLM) and, with `--allow-load-weights` (off by default, like vLLM's dev-mode
routes: it lets any client make the server read a directory), reload weights with
POST /v1/load_weights {"path": DIR} between batches. `--dev-mode` (or `VLLM_SERVER_DEV_MODE=1`, as
in vLLM) adds vLLM's unauthenticated dev routes POST /collective_rpc and POST /reset_prefix_cache
(`models.serve_rpc`), and `--worker-extension-cls` mixes a class into the serving worker as vLLM
does: `--worker-extension-cls venus_core.rl.online.vllm_worker.VenusWorkerExtension` is the vLLM
weight-sync path of online RL (`online_rl.rollout_server_kind: vllm`), run here on the transformers
model. Prints one line with the URL once listening (port 0 picks a free port), then runs until
SIGINT / SIGTERM.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from venus_core.cli._common import SET_HELP, fail, out_console


def register(app: typer.Typer) -> None:
    """Add the `serve` command to a typer app."""

    @app.command("serve")
    def serve_cmd(
        model: Annotated[str, typer.Option("--model", "-m", help="checkpoint directory, 'bootstrap' or 'tiny'")],
        name: Annotated[str | None, typer.Option(help="served model id (default: from --model)")] = None,
        host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="port (0 = any free port)")] = 8000,
        max_batch: Annotated[int, typer.Option(help="most rows (requests x n) decoded in one batch")] = 8,
        batch_wait_ms: Annotated[float, typer.Option(help="how long a batch waits for more requests")] = 5.0,
        max_tokens_limit: Annotated[int, typer.Option(help="largest max_tokens a request may ask for")] = 4096,
        spec: Annotated[Path | None, typer.Option(help="agent spec (model section: dtype, attention, tiny)")] = None,
        overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
        tiny_dir: Annotated[Path, typer.Option(help="where --model tiny is built")] = Path("runs/serve/tiny-model"),
        device: Annotated[str, typer.Option(
            help="torch device: auto (the local rank's GPU, else cuda:0, else cpu), cpu, cuda, cuda:N")] = "auto",
        threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's)")] = None,
        log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "warning",
        allow_load_weights: Annotated[bool, typer.Option(help="enable POST /v1/load_weights (online RL)")] = False,
        return_tokens_as_token_ids: Annotated[bool, typer.Option(
            help="logprobs name tokens as token_id:<id> unless a request says otherwise (vLLM's flag)")] = False,
        dev_mode: Annotated[bool, typer.Option(
            help="vLLM's dev routes POST /collective_rpc, /reset_prefix_cache (unauthenticated; also "
                 "VLLM_SERVER_DEV_MODE=1)")] = False,
        worker_extension_cls: Annotated[str | None, typer.Option(
            help="class mixed into the serving worker, as vLLM's flag (e.g. "
                 "venus_core.rl.online.vllm_worker.VenusWorkerExtension)")] = None,
    ) -> None:
        """Serve a model over the OpenAI chat-completions API (text + image data URLs), batching requests."""
        import torch

        from venus_core.config import AgentSpec, SpecError, load_spec
        from venus_core.models.loading import load_model
        from venus_core.models.placement import DeviceError, describe_model
        from venus_core.models.serve_rpc import dev_mode_from_env, make_worker
        from venus_core.models.serve_runner import logits_size
        from venus_core.models.serve_weights import WeightReloader
        from venus_core.models.server import bind, create_app, serve, transformers_runner
        from venus_core.train.base import BOOTSTRAP_DIR

        if max_batch < 1 or batch_wait_ms < 0 or max_tokens_limit < 1:
            fail("--max-batch and --max-tokens-limit must be >= 1 and --batch-wait-ms >= 0")
        try:
            agent = load_spec(spec, overrides or []) if spec is not None else AgentSpec()
        except (SpecError, ValueError, OSError) as exc:
            fail(str(exc))
        try:
            dev_mode = dev_mode or dev_mode_from_env()
        except ValueError as exc:
            fail(str(exc))
        if threads is not None:
            torch.set_num_threads(threads)
        target: str | Path = BOOTSTRAP_DIR if model == "bootstrap" else model
        if model not in ("tiny", "bootstrap") and not Path(model).is_dir():
            fail(f"--model {model!r}: not a checkpoint directory (or 'tiny' / 'bootstrap')")
        served = name or (model if model in ("tiny", "bootstrap") else Path(model.rstrip("/")).name)
        try:
            # any checkpoint may be served (a hub download too): verified, its SHA256SUMS checked if present
            loaded, processor = load_model(target, agent.model, device, tiny_dir=tiny_dir, require_manifest=False)
            sock = bind(host, port)
        except DeviceError as exc:
            fail(f"--device {device}: {exc}")
        except (OSError, ValueError) as exc:
            fail(f"--model {model!r}: {exc}")
        try:  # the extension is loaded whether or not dev mode exposes it, as vLLM does
            worker = make_worker(loaded, worker_extension_cls) if dev_mode or worker_extension_cls else None
        except ValueError as exc:
            fail(f"--worker-extension-cls: {exc}")
        app = create_app(transformers_runner(loaded, processor), served, max_batch=max_batch,
                         batch_wait_ms=batch_wait_ms, max_tokens_limit=max_tokens_limit,
                         vocab_size=logits_size(loaded), return_tokens_as_token_ids=return_tokens_as_token_ids,
                         weights=WeightReloader(loaded) if allow_load_weights else None,
                         worker=worker if dev_mode else None)
        bound_host, bound_port = sock.getsockname()[:2]
        placed = describe_model(loaded)
        out_console.print(f"model on {placed['device']} ({placed['dtype']}, {placed['attn_implementation']})")
        out_console.print(f"serving {served} at http://{bound_host}:{bound_port}/v1 (max batch {max_batch})")
        if dev_mode:
            out_console.print("dev mode: POST /collective_rpc and /reset_prefix_cache are enabled and "
                              "unauthenticated")
        sys.stdout.flush()
        serve(app, sock, log_level=log_level)
