"""Fixtures of the data tests; the helpers live in data_helpers.py (a uniquely named module: several
test folders have a conftest.py, so `from conftest import ...` would pick whichever loaded last)."""

from data_helpers import build, good_dataset  # noqa: F401 - fixtures
