"""The one-way import rule of docs/architecture.md (rule 1), enforced on the source (every import statement,
including those inside functions):

    pipelines -> components -> runtime -> (algorithms, io) -> config

and the repository layout it relies on.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ("actions", "data", "models", "rewards", "rl", "train", "scoring", "envs", "daas", "merge", "eval",
              "flywheel")
PLATFORM_LIBS = ("kfp", "mlflow", "minio", "kubernetes")


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{path}:{node.lineno}: use absolute imports (venus_core....)")
    return found


def _files(sub: str) -> list[Path]:
    return sorted((ROOT / sub).rglob("*.py")) if (ROOT / sub).exists() else []


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _top(module: str) -> str:
    return module.split(".")[0]


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "venus_core" or len(parts) == 1:
        return None
    return parts[1]


def _violations(files: list[Path], allowed_layers: set[str], banned_tops: tuple[str, ...] = ()) -> list[str]:
    bad = []
    for f in files:
        for line, mod in _imports(f):
            layer = _layer(mod)
            if layer is not None and layer not in allowed_layers:
                bad.append(f"{_rel(f)}:{line} imports {mod}")
            if _top(mod) in banned_tops:
                bad.append(f"{_rel(f)}:{line} imports {mod}")
            if _top(mod) in ("components", "pipelines"):
                bad.append(f"{_rel(f)}:{line} imports {mod} (upward)")
    return bad


def test_config_is_the_bottom_layer() -> None:
    assert _violations(_files("venus_core/config"), {"config"}, PLATFORM_LIBS) == []


@pytest.mark.parametrize("package", ALGORITHMS)
def test_algorithms_never_import_io_or_platform_libraries(package: str) -> None:
    allowed = {"config", *ALGORITHMS}
    assert _violations(_files(f"venus_core/{package}"), allowed, PLATFORM_LIBS) == []


def test_io_imports_only_config() -> None:
    assert _violations(_files("venus_core/io"), {"config", "io"}) == []


def test_runtime_does_not_import_cli() -> None:
    allowed = {"config", "io", "runtime", *ALGORITHMS}
    assert _violations(_files("venus_core/runtime"), allowed) == []


def test_components_never_import_torch_and_only_call_runtime() -> None:
    bad = []
    for f in _files("components"):
        for line, mod in _imports(f):
            if _top(mod) in ("torch", "transformers", "deepspeed", "vllm"):
                bad.append(f"{_rel(f)}:{line} imports {mod}")
            layer = _layer(mod)
            if layer is not None and layer not in ("runtime", "config"):
                bad.append(f"{_rel(f)}:{line} imports {mod}")
            if _top(mod) == "pipelines":
                bad.append(f"{_rel(f)}:{line} imports {mod} (upward)")
    assert bad == []


def test_the_checker_catches_a_violation(tmp_path: Path) -> None:
    """The rule above can fail: an algorithm module importing mlflow is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    import mlflow\n    from venus_core.io.tracking import x\n")
    found = _violations([bad], {"config"}, PLATFORM_LIBS)
    assert len(found) == 2 and "mlflow" in found[0] and "venus_core.io" in found[1]


def test_layout_exists() -> None:
    for p in ("pyproject.toml", "README.md", ".ci/run", "venus_core", "components", "pipelines", "images",
              "manifests", "agents", "benchmarks", "tests"):
        assert (ROOT / p).exists(), p
