"""Data-quality scoring: judges (rules here; MLLM backends later) and the keep/rewrite/rebuild policy."""
