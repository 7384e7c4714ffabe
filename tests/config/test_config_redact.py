"""`redact`: URL user-info and credential values masked, ordinary text kept."""

from __future__ import annotations

from venus_core.config.redact import MASK, redact


def test_url_userinfo_is_masked_wherever_it_appears() -> None:
    text = ("API request to http://venus:s3cr3t@mlflow:5000/api/2.0/x failed; "
            "also https://tok3n@host/p and s3://bucket/key@2x.png")
    assert redact(text, {}) == ("API request to http://***@mlflow:5000/api/2.0/x failed; "
                                "also https://***@host/p and s3://bucket/key@2x.png")


def test_credential_values_are_masked_short_and_unset_ones_ignored() -> None:
    env = {"AWS_SECRET_ACCESS_KEY": "abcd1234", "MLFLOW_TRACKING_PASSWORD": "pw", "HOME": "/root"}
    assert redact("key abcd1234 pw /root", env) == f"key {MASK} pw /root"
    assert redact("plain text, no URL", env) == "plain text, no URL"
