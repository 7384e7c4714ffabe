#!/usr/bin/env bash
# Device check (issue 20 §4): scripts/gpu_check.py's pieces (start-up check, bf16 GRPO step, weight sync
# into venus serve / vLLM, 2-step DeepSpeed mid-training) on this machine's GPU, figures printed and in JSON.
#   scripts/gpu_check.sh [--cpu-dry-run] [--out FILE] [--workdir DIR]   run the check (docs/devices.md)
#   scripts/gpu_check.sh --fetch-wheels       here, where PyPI is reachable: fill .whl/ for the device machine
# Python: $VENUS_PYTHON, else the first of .venv/bin/python, python3 whose torch sees CUDA (any torch for
# --cpu-dry-run). When that Python lacks venus_core's own needs (pydantic: the device image) and .whl/ holds
# wheels, they are installed into a temporary directory first. Nothing is fetched from the network.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# What the device image lacks, at the versions CI tests here (.venv), for its Python 3.12.
WHEELS=(pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
        typing_extensions==4.16.0 fastapi==0.165.0 annotated-doc==0.0.7 starlette==1.10.0 uvicorn==0.55.0
        hjson==3.1.0)
DEEPSPEED=deepspeed==0.19.8

if [ "${1:-}" = "--fetch-wheels" ]; then
  py="${VENUS_PYTHON:-.venv/bin/python}"
  mkdir -p .whl
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${WHEELS[@]}"
  # DeepSpeed is published as source only: a wheel without its compiled ops (built on first use, if
  # any; the device image has nvcc and ninja). Its build imports torch, which the .venv has.
  DS_BUILD_OPS=0 "$py" -m pip wheel -q --no-deps --no-build-isolation -w .whl "$DEEPSPEED"
  du -sh .whl && ls .whl
  exit 0
fi

dry=0
for a in "$@"; do [ "$a" = "--cpu-dry-run" ] && dry=1; done

pick_python() {
  local c probe
  if [ "$dry" = 1 ]; then probe="import torch"
  else probe="import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; fi
  for c in .venv/bin/python python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c "$probe" 2>/dev/null; then echo "$c"; return; fi
  done
  echo python3  # no torch sees CUDA: the check's devices piece says so and stops (exit 2)
}
PY="${VENUS_PYTHON:-$(pick_python)}"

if ! "$PY" -c "import pydantic" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  site="${TMPDIR:-/tmp}/venus-gpu-check-site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi

export HF_HUB_OFFLINE=1 MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-none}" MLFLOW_DISABLE_TELEMETRY=true
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
echo "gpu_check.sh: python $PY" >&2
exec "$PY" scripts/gpu_check.py "$@"
