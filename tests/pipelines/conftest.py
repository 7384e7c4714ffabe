"""The top-level `pipelines` and `components` packages import from the repository root.

Until pyproject packages them beside venus_core, tests put the root on sys.path themselves.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
