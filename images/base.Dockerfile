# syntax=docker/dockerfile:1.7
# Venus base image (CPU): the project and its CPU dependencies. Runs every CPU stage
# (score_data, merge, evaluate on CPU, KFP lightweight components) and the device gateway.
# Build from the repository root:  docker build -f images/base.Dockerfile --build-arg VENUS_GIT_REV=$(git rev-parse HEAD) .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG VENUS_GIT_REV=unknown
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG VENUS_UID=10001

# fonts: the synthetic GUI renderer draws Latin and CJK text; adb: the Android env driver;
# chromium: MiniWoB++ pages in headless Chromium (score_data's kind=collect sources, the evaluate
# stage's live web suites), driven by Playwright at /usr/bin/chromium (venus_core.envs.browser).
RUN apt-get update \
 && apt-get install -y --no-install-recommends fonts-dejavu-core fonts-wqy-microhei adb ca-certificates chromium \
 && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VENUS_GIT_REV=${VENUS_GIT_REV} \
    HOME=/home/venus \
    HF_HOME=/home/venus/.cache/huggingface \
    NUMBA_CACHE_DIR=/home/venus/.cache/numba \
    MLFLOW_DISABLE_TELEMETRY=true

# torch first, from the CPU index, so that `pip install .` never resolves a CUDA build.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"

WORKDIR /opt/venus
COPY pyproject.toml README.md ./
COPY venus_core ./venus_core
COPY agents ./agents
# Fails the build if resolving the project replaced the CPU torch wheel.
RUN pip install . && python -c "import torch, venus_core; assert torch.__version__.endswith('+cpu'), torch.__version__"

RUN useradd --uid ${VENUS_UID} --create-home --home-dir /home/venus --shell /usr/sbin/nologin venus \
 && mkdir -p /home/venus/.cache /work && chown -R venus:venus /home/venus /work
USER ${VENUS_UID}:${VENUS_UID}
WORKDIR /work

# Batch image: Kubernetes ignores HEALTHCHECK and the jobs are short-lived; liveness of the
# long-running gateway is a probe in manifests/. The job runs as `python -m venus_core.runtime.<job>`
# (KFP sets the command); `venus` is the default for interactive use.
HEALTHCHECK NONE
ENTRYPOINT ["venus"]
CMD ["--help"]
