"""Which backend errors are worth retrying, how often, and how errors are reported.

Retries happen per HTTP request inside urllib3 (the client the `minio` SDK is built on), configured
from `RetryPolicy`: exponential backoff with jitter, bounded attempts, `Retry-After` honoured. Per
request rather than per operation so that one failed part of a multipart upload is re-sent alone
instead of restarting a multi-GB upload. Retried: connection errors, timeouts, HTTP 500/502/503/504
(S3's SlowDown is a 503). Everything else (403, 404, bad requests) surfaces at once. When the budget
is spent the error becomes TransientStorageError saying how many attempts were made.
"""

from __future__ import annotations

from dataclasses import dataclass

import urllib3
from minio.error import InvalidResponseError, S3Error, ServerError
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import MaxRetryError

from venus_core.io.storage.errors import ArtifactNotFoundError, StorageError, TransientStorageError

TRANSIENT_STATUS = (500, 502, 503, 504)
TRANSIENT_CODES = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "RequestTimeTooSkewed"}
NOT_FOUND_CODES = {"NoSuchKey", "NoSuchObject"}


@dataclass(frozen=True)
class RetryPolicy:
    """Retry budget for one HTTP request.

    attempts: total tries including the first (>= 1). backoff: base delay in seconds; the n-th retry
    waits about backoff * 2**(n-1) (the first retry is immediate, urllib3's rule), plus up to
    `jitter` seconds drawn uniformly, capped at `max_backoff`. connect_timeout / read_timeout: seconds.
    """

    attempts: int = 5
    backoff: float = 0.25
    max_backoff: float = 20.0
    jitter: float = 0.25
    connect_timeout: float = 10.0
    read_timeout: float = 120.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        for name in ("backoff", "max_backoff", "jitter"):
            if getattr(self, name) < 0:
                raise ValueError(f"RetryPolicy.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("connect_timeout", "read_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RetryPolicy.{name} must be > 0, got {getattr(self, name)}")

    def urllib3_retry(self) -> urllib3.Retry:
        return urllib3.Retry(
            total=self.attempts - 1,
            redirect=False,  # S3 redirects mean a wrong region or endpoint: report them, do not follow
            status_forcelist=TRANSIENT_STATUS,
            allowed_methods=None,  # every method: S3 PUT/POST/DELETE of a whole object or part are idempotent
            backoff_factor=self.backoff,
            backoff_max=self.max_backoff,
            backoff_jitter=self.jitter,
            raise_on_status=False,  # let the SDK parse the final error body (SlowDown etc.)
            respect_retry_after_header=True,
        )

    def pool(self) -> urllib3.PoolManager:
        return urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=self.connect_timeout, read=self.read_timeout),
            retries=self.urllib3_retry(),
            maxsize=10,
        )


def status_of(exc: BaseException) -> int | None:
    """HTTP status carried by an SDK error, if any."""
    if isinstance(exc, S3Error):
        return exc.response.status if exc.response is not None else None
    if isinstance(exc, ServerError):
        return exc.status_code
    if isinstance(exc, InvalidResponseError):
        return getattr(exc, "_code", None)
    return None


def is_transient(exc: BaseException) -> bool:
    """True for errors a later retry could fix: connection trouble, timeouts, 5xx, SlowDown."""
    if isinstance(exc, S3Error) and exc.code in TRANSIENT_CODES:
        return True
    status = status_of(exc)
    if status is not None:
        return status >= 500
    return isinstance(exc, (Urllib3Error, ConnectionError, TimeoutError))


def translate(exc: BaseException, what: str, policy: RetryPolicy) -> StorageError:
    """A clear StorageError for an SDK / transport error during `what` (which names the key/URI)."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, S3Error) and exc.code in NOT_FOUND_CODES:
        return ArtifactNotFoundError(f"{what}: does not exist")
    if isinstance(exc, S3Error) and exc.code == "NoSuchBucket":
        return StorageError(f"{what}: bucket {exc.bucket_name!r} does not exist")
    if is_transient(exc):
        reason = exc.reason if isinstance(exc, MaxRetryError) else exc
        return TransientStorageError(
            f"{what}: gave up after {policy.attempts} attempt(s) of retryable errors; last: {reason}"
        )
    if isinstance(exc, S3Error):
        return StorageError(f"{what}: {exc.code} (HTTP {status_of(exc)}): {exc.message}")
    return StorageError(f"{what}: {type(exc).__name__}: {exc}")
