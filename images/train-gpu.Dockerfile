# syntax=docker/dockerfile:1.7
# Venus training image (CUDA): torch CUDA wheel, DeepSpeed, the project; flash-attention optional.
# Runs mid_train / offline_rl / online_rl pods and Kubeflow Trainer TrainJob nodes (torchrun).
# Two stages: wheels that compile (flash-attn, DeepSpeed ops) need nvcc from the -devel image;
# the runtime stage copies only the virtual environment.
# Build from the repository root:
#   docker build -f images/train-gpu.Dockerfile --build-arg VENUS_GIT_REV=$(git rev-parse HEAD) \
#     --build-arg WITH_FLASH_ATTN=1 .
ARG CUDA_VERSION=12.8.1
ARG UBUNTU=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-devel-${UBUNTU} AS build
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
ARG DEEPSPEED_VERSION=0.19.8
ARG FLASH_ATTN_VERSION=2.8.3.post2
ARG WITH_FLASH_ATTN=0
ARG MAX_JOBS=8
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev build-essential git ninja-build \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 MAX_JOBS=${MAX_JOBS}
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"
WORKDIR /opt/venus
COPY pyproject.toml README.md ./
COPY venus_core ./venus_core
COPY agents ./agents
# Not `.[gpu]`: that extra also pulls vLLM (its own torch pin; it lives in rollout-vllm) and
# flash-attn unconditionally. DS_BUILD_OPS=0: no DeepSpeed op is pre-built and none is JIT-built
# at run time either, since the trainer hands DeepSpeed a torch AdamW (venus_core/train/ds_backend.py).
# flash-attn builds against the installed torch (--no-build-isolation; a Python 3.12 venv has no
# setuptools, hence the pinned build tools).
RUN DS_BUILD_OPS=0 pip install . "deepspeed==${DEEPSPEED_VERSION}"
RUN if [ "${WITH_FLASH_ATTN}" = "1" ]; then \
      pip install packaging==26.3 wheel==0.48.0 setuptools==84.2.1 psutil==7.2.2 && pip install --no-build-isolation "flash-attn==${FLASH_ATTN_VERSION}"; \
    fi

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-runtime-${UBUNTU}
ARG VENUS_GIT_REV=unknown
ARG VENUS_UID=10001
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 fonts-dejavu-core fonts-wqy-microhei ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VENUS_GIT_REV=${VENUS_GIT_REV} \
    HOME=/home/venus \
    HF_HOME=/home/venus/.cache/huggingface \
    NUMBA_CACHE_DIR=/home/venus/.cache/numba \
    MLFLOW_DISABLE_TELEMETRY=true
# ubuntu24.04 images ship a uid-1000 user `ubuntu`; ours is 10001 like every Venus image.
RUN useradd --uid ${VENUS_UID} --create-home --home-dir /home/venus --shell /usr/sbin/nologin venus \
 && mkdir -p /home/venus/.cache /work /checkpoints && chown -R venus:venus /home/venus /work /checkpoints
USER ${VENUS_UID}:${VENUS_UID}
WORKDIR /work
# Batch image: no HEALTHCHECK (Kubernetes ignores it; TrainJob pods are run-to-completion).
HEALTHCHECK NONE
ENTRYPOINT ["venus"]
CMD ["--help"]
