"""Lease tokens: valid ones pass; forged, expired and cross-device/client ones are refused."""

from __future__ import annotations

import time

import pytest

from venus_core.daas import Claims, TokenExpired, TokenForged, TokenMismatch, TokenSigner

SIGNER = TokenSigner(b"k" * 32)


def claims(**kw: object) -> Claims:
    base: dict[str, object] = {
        "lease": "L1",
        "device": "dev-a",
        "client": "w1",
        "group": "g",
        "exp": time.time() + 60,
    }
    base.update(kw)
    return Claims(**base)  # type: ignore[arg-type]


def test_round_trip() -> None:
    c = claims()
    assert SIGNER.verify(SIGNER.sign(c), device="dev-a", client="w1") == c


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"),  # signature changed
        lambda t: "x" + t,  # body changed
        lambda t: t.replace(".", ""),  # no separator
        lambda t: "!!!.???",  # not base64
    ],
)
def test_forged(mangle) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TokenForged):
        SIGNER.verify(mangle(SIGNER.sign(claims())))


def test_other_secret_is_forged() -> None:
    other = TokenSigner(b"z" * 32)
    with pytest.raises(TokenForged):
        SIGNER.verify(other.sign(claims()))


def test_body_swap_between_tokens_is_forged() -> None:
    a, b = SIGNER.sign(claims(device="dev-a")), SIGNER.sign(claims(device="dev-b"))
    with pytest.raises(TokenForged):
        SIGNER.verify(b.split(".")[0] + "." + a.split(".")[1])


def test_expired() -> None:
    tok = SIGNER.sign(claims(exp=time.time() - 1))
    with pytest.raises(TokenExpired):
        SIGNER.verify(tok)
    assert SIGNER.verify(SIGNER.sign(claims(exp=100.0)), now=99.0).exp == 100.0


def test_cross_device_and_cross_client() -> None:
    tok = SIGNER.sign(claims())
    with pytest.raises(TokenMismatch, match="dev-a"):
        SIGNER.verify(tok, device="dev-b")
    with pytest.raises(TokenMismatch, match="w1"):
        SIGNER.verify(tok, device="dev-a", client="w2")


def test_short_secret_refused() -> None:
    with pytest.raises(ValueError, match="at least 16 bytes"):
        TokenSigner(b"short")
