"""One rank of `test_a_base_that_fails_to_fetch_on_one_rank_stops_every_rank` (launched by torch.distributed.run):
`mid_train._local_base` with a `model.base` that rank 0 cannot fetch; each rank writes what it raised."""

from __future__ import annotations

import sys
from pathlib import Path

from venus_core.config import load_spec
from venus_core.runtime.mid_train import _local_base
from venus_core.train.distributed import setup, teardown

spec_dir, base, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
spec = load_spec(spec_dir, [f"model.base={base}", "mid_train.distributed.backend=ddp"])
env = setup(spec.mid_train, "cpu")
try:
    _local_base(spec, env)
    (out / f"rank{env.rank}.txt").write_text("fetched")
except Exception as exc:  # noqa: BLE001 - the test reads what each rank raised
    (out / f"rank{env.rank}.txt").write_text(f"{type(exc).__name__}: {exc}")
finally:
    teardown()
