"""Venus: an open, Kubernetes-native platform for training GUI agents (the UI-Venus-1.5 recipe).

The package is layered (see docs/architecture.md): `config` at the bottom, the algorithm packages
(`actions`, `data`, `models`, `rewards`, `rl`, `train`, `scoring`, `envs`, `daas`, `merge`, `eval`)
above it, `io` beside them, `runtime` jobs on top, and the `cli` over everything.
"""

__version__ = "0.1.0"
