"""Fixtures of the daas tests; the helpers live in daas_helpers.py (a uniquely named module: several
test folders have a conftest.py, so `from conftest import ...` would pick whichever loaded last)."""

from daas_helpers import echo_server, mute_server, stacks  # noqa: F401 - fixtures
