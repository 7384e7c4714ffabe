"""Storage errors: one small hierarchy so callers can tell "retry later" from "fix your input".

Every error names the key (and the store URI) it is about, because an artifact error that only
says "404" sends the reader on a hunt through a pipeline run.
"""

from __future__ import annotations


class StorageError(Exception):
    """Any failure of an artifact store operation."""


class InvalidKeyError(StorageError, ValueError):
    """A key that could escape the store or cannot be represented on both backends."""


class ArtifactNotFoundError(StorageError, FileNotFoundError):
    """The key (or the prefix's completion marker) does not exist."""


class ArtifactExistsError(StorageError, FileExistsError):
    """Publishing would replace an existing artifact and overwrite was not asked for."""


class IntegrityError(StorageError):
    """Downloaded bytes do not match the sha256 recorded when they were stored."""


class IncompleteArtifactError(StorageError):
    """A directory artifact without its completion marker: a publish failed or is in progress."""


class TransientStorageError(StorageError):
    """The backend kept failing with errors worth retrying until the retry budget ran out."""
