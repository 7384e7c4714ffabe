"""On-disk judgement cache keyed by (sample hash, judge id, prompt version).

Why: an MLLM judge costs GPU time per sample; re-running the scoring stage after a crash, or with
a changed policy threshold, must not pay again. sqlite3 (standard library) gives atomic writes and
concurrent readers without a server. The prompt version is part of the key, so changing the prompt
invalidates every cached judgement of that judge at once. Re-derived steps (the rebuild path) are
stored in the same table under the judge id with a `#rederive` suffix.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from venus_core.scoring.protocol import judgement_from_dict, judgement_to_dict
from venus_core.scoring.rules import Judgement

_SCHEMA = """
CREATE TABLE IF NOT EXISTS judgements (
    sample_hash TEXT NOT NULL,
    judge_id TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (sample_hash, judge_id, prompt_version)
)
"""


class JudgementCache:
    """A small sqlite3 store of judgements; safe to share between threads of one process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False)
            self._db.execute(_SCHEMA)
            self._db.commit()
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{self.path}: not a judgement cache: {exc}") from None
        self.hits = 0
        self.misses = 0

    def get_payloads(self, hashes: Sequence[str], judge_id: str, prompt_version: str) -> dict[str, dict[str, Any]]:
        """The stored JSON objects of the hashes found (counted as hits; the rest as misses)."""
        found: dict[str, dict[str, Any]] = {}
        with self._lock:
            for h in hashes:
                row = self._db.execute(
                    "SELECT payload FROM judgements WHERE sample_hash=? AND judge_id=? AND prompt_version=?",
                    (h, judge_id, prompt_version),
                ).fetchone()
                if row is not None:
                    found[h] = json.loads(row[0])
            self.hits += len(found)
            self.misses += len(set(hashes) - set(found))
        return found

    def put_payloads(self, items: Sequence[tuple[str, dict[str, Any]]], judge_id: str, prompt_version: str) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO judgements VALUES (?, ?, ?, ?)",
                [(h, judge_id, prompt_version, json.dumps(payload)) for h, payload in items],
            )
            self._db.commit()

    def get_many(self, hashes: Sequence[str], judge_id: str, prompt_version: str) -> dict[str, Judgement]:
        found = self.get_payloads(hashes, judge_id, prompt_version)
        return {h: judgement_from_dict(d) for h, d in found.items()}

    def put_many(self, items: Sequence[tuple[str, Judgement]], judge_id: str, prompt_version: str) -> None:
        self.put_payloads([(h, judgement_to_dict(j)) for h, j in items], judge_id, prompt_version)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
