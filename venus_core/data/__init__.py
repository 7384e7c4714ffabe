"""Datasets of the platform: record schema, on-disk format and validation.

`schema` defines the four record kinds (grounding, navigation step, trajectory, perception /
GUI-VQA), `store` the atomic sharded-JSONL + content-addressed-PNG dataset directory (`images`
its content addresses and defensive image decoding), and
`validate` the full consistency check behind `venus data validate`. Importers and the synthetic
GUI world (`venus_core.data.synth`) write through `DatasetWriter`.
"""

from venus_core.data.schema import (
    DOMAINS,
    KINDS,
    SCHEMA_VERSION,
    Box,
    Domain,
    GroundingSample,
    HistoryItem,
    ImageRef,
    NavigationStep,
    Provenance,
    QASample,
    Record,
    RecordError,
    Trajectory,
    TrajectoryStep,
    parse_record,
    record_images,
)
from venus_core.data.images import MAX_IMAGE_PIXELS, ImageError
from venus_core.data.store import (
    DatasetReader,
    DatasetWriter,
    Manifest,
    ShardInfo,
    load_manifest,
)
from venus_core.data.validate import Problem, ValidationReport, validate_dataset

__all__ = [
    "DOMAINS",
    "KINDS",
    "MAX_IMAGE_PIXELS",
    "SCHEMA_VERSION",
    "Box",
    "DatasetReader",
    "DatasetWriter",
    "Domain",
    "GroundingSample",
    "HistoryItem",
    "ImageError",
    "ImageRef",
    "Manifest",
    "NavigationStep",
    "Problem",
    "Provenance",
    "QASample",
    "Record",
    "RecordError",
    "ShardInfo",
    "Trajectory",
    "TrajectoryStep",
    "ValidationReport",
    "load_manifest",
    "parse_record",
    "record_images",
    "validate_dataset",
]
