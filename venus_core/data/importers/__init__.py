"""Importers of public GUI-agent datasets into the Venus schema (`venus data import`).

Why: UI-Venus-1.5's mid-training mixes 30+ public datasets, and its evaluation reads the public
benchmarks; each has its own layout, coordinate frame and action names. An importer maps one
source format onto the project schema (`venus_core.data.schema`) and the unified action space
(`venus_core.actions`, coordinates in 0–1000, one canonical spelling per action, scroll direction
= the finger's motion, the UI-Venus-1.0 "unify scroll semantics" rule), rejecting bad source
records into `quarantine.jsonl` with a reason instead of failing or dropping them.

Importing this package registers every importer in `IMPORTERS` (it is a `venus_core.plugins`
entry point): `screenspot-v2`, `screenspot-pro`, `androidcontrol`, `guiodyssey`, `mind2web`,
`miniwob-traces`, `venus`. `run_import` runs one (see `runner` for the output layout, counts and resuming).
"""

from venus_core.data.importers import (  # noqa: F401 - imported to register the importers
    androidcontrol,
    guiodyssey,
    mind2web,
    miniwob_traces,
    screenspot,
    venus,
)
from venus_core.data.importers.base import (
    Candidate,
    ImageStage,
    Importer,
    Reject,
    SourceRoot,
    StagedImage,
)
from venus_core.data.importers.runner import (
    CHECKPOINT_NAME,
    QUARANTINE_NAME,
    REPORT_NAME,
    ImportReport,
    load_report,
    run_import,
)

__all__ = [
    "CHECKPOINT_NAME", "QUARANTINE_NAME", "REPORT_NAME", "Candidate", "ImageStage", "ImportReport",
    "Importer", "Reject", "SourceRoot", "StagedImage", "load_report", "run_import",
]
