"""Credentials out of messages and records: a URL's user-info, and the values of credential variables.

Why: jobs quote their endpoints (which store they log to, which server was down) and the error
texts of libraries that quote them too: MLflow's "API request to <url> failed" repeats a tracking
URI's `user:password@`. Such messages go to stderr, to the pod log, into `OUT/mlflow_run.json` and
into MLflow itself. `redact` is applied where the project writes them (runtime.tracking,
io.tracking). Why here, in the bottom layer: io and runtime both use it, and io imports only
config. Credentials themselves arrive as environment variables from Kubernetes Secrets
(pipelines/k8s.py) and are read only by the clients that need them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

# the environment variables whose values are secrets (the S3 clients, MLflow, the device gateway,
# OpenAI-compatible judges / evaluation servers)
CREDENTIAL_VARS = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "MINIO_SECRET_KEY",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
    "VENUS_GATEWAY_SECRET",
    "VENUS_EVAL_API_KEY",
    "VENUS_JUDGE_API_KEY",
    "OPENAI_API_KEY",
)
MASK = "***"
MIN_SECRET_CHARS = 4  # shorter values would mask ordinary text
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with every URL user-info (`scheme://user:pass@` -> `scheme://***@`) and every value
    of a CREDENTIAL_VARS variable set in `environ` (default: this process's) masked."""
    env = os.environ if environ is None else environ
    out = _USERINFO.sub(rf"\g<scheme>{MASK}@", text)
    for var in CREDENTIAL_VARS:
        value = env.get(var, "")
        if len(value) >= MIN_SECRET_CHARS:
            out = out.replace(value, MASK)
    return out
