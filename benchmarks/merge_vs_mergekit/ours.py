"""Run `venus merge` exactly as a user would: the `venus` console script's entry point
(`venus_core.cli:main`), with this script's arguments after `merge`."""

from __future__ import annotations

import sys

from venus_core.cli import main

if __name__ == "__main__":
    sys.argv = ["venus", "merge", *sys.argv[1:]]
    main()
