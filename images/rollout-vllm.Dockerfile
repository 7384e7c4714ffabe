# syntax=docker/dockerfile:1.7
# Venus rollout / judge image: vLLM's official OpenAI-compatible server plus the project
# (processor files for Qwen3-VL checkpoints, the judge prompts, the rollout client, and the worker
# extension of online RL's weight sync: --worker-extension-cls
# venus_core.rl.online.vllm_worker.VenusWorkerExtension, which must import in this image).
# Build from the repository root:
#   docker build -f images/rollout-vllm.Dockerfile --build-arg VENUS_GIT_REV=$(git rev-parse HEAD) .
ARG VLLM_IMAGE=vllm/vllm-openai:v0.33.0
FROM ${VLLM_IMAGE}
ARG VENUS_GIT_REV=unknown
ARG VENUS_UID=10001
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /opt/venus
COPY pyproject.toml README.md ./
COPY venus_core ./venus_core
COPY agents ./agents
# --no-deps: vLLM pins its own torch / transformers; the project's light dependencies are added
# explicitly so that installing the project never replaces vLLM's pins.
RUN pip install --no-deps . \
 && pip install "pydantic>=2.7,<3" "pyyaml>=6,<7" "typer>=0.12,<1" "rich>=13,<16" "minio>=7.2,<8" \
 && python3 -c "import vllm, venus_core.rl.online.vllm_worker"
ENV VENUS_GIT_REV=${VENUS_GIT_REV} \
    HOME=/home/venus \
    HF_HOME=/home/venus/.cache/huggingface \
    VLLM_NO_USAGE_STATS=1
RUN useradd --uid ${VENUS_UID} --create-home --home-dir /home/venus --shell /usr/sbin/nologin venus \
 && mkdir -p /home/venus/.cache /models && chown -R venus:venus /home/venus /models
USER ${VENUS_UID}:${VENUS_UID}
WORKDIR /home/venus
EXPOSE 8000
# Docker-level check (docker run / compose); in Kubernetes the readiness probe on /health is used.
HEALTHCHECK --interval=30s --timeout=5s --start-period=600s --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
ENTRYPOINT ["vllm", "serve"]
CMD ["--help"]
