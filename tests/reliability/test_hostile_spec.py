"""Hostile agent-spec files and overrides (issue 22 §1): each a `SpecError` naming the file (or the
override), in well under a second, never a hang, a crash or a NaN in the resolved spec."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from venus_core.config.loader import MAX_SPEC_BYTES, SpecError, load_spec

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny" / "agent.yaml"


def _bomb(levels: int = 9, fanout: int = 9) -> str:
    """ "Billion laughs": 9 levels of 9 aliases expand to 9**9 (387 million) values in ~700 bytes."""
    lines = ["a0: &a0 [lol]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fanout)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nmid_train: {{max_steps: *a{levels - 1}}}\n"


FILES = {
    "alias bomb": (_bomb(), "expands to more than 100000 values"),
    "cyclic alias": ("mid_train: &m {max_steps: 3, x: *m}\n", "nests deeper than 64 levels"),
    "nesting past the parser's limit": ("a: " + "[" * 100_000 + "\n", "exceeded maximum nesting depth"),
    "nesting past the spec's depth": ("a: " + "[" * 70 + "]" * 70 + "\n", "nests deeper than 64 levels"),
    "5,000-digit integer": ("mid_train: {max_steps: " + "9" * 5000 + "}\n", "not valid YAML"),
    "NaN learning rate": ("mid_train: {lr: .nan}\n", "mid_train.lr"),
    "infinite learning rate": ("mid_train: {lr: .inf}\n", "mid_train.lr"),
    "python object tag": ("name: !!python/object/apply:os.system ['true']\n", "not valid YAML"),
    "not a mapping": ("- a\n- b\n", "must be a YAML mapping"),
}


@pytest.fixture(scope="module", autouse=True)
def _plugins_loaded() -> None:
    load_spec(SPEC)  # the first load imports the registries' plugins: not part of the timing


@pytest.mark.parametrize("case", sorted(FILES))
def test_a_hostile_spec_file_is_a_spec_error_naming_the_file(tmp_path: Path, case: str) -> None:
    text, words = FILES[case]
    path = tmp_path / "agent.yaml"
    path.write_text(text, encoding="utf-8")
    t0 = time.perf_counter()
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert time.perf_counter() - t0 < 2.0
    assert str(path) in str(err.value) and words in str(err.value), str(err.value)[:300]


def test_an_oversized_or_non_utf8_file_is_refused_before_parsing(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(MAX_SPEC_BYTES + 1)  # sparse
    with pytest.raises(SpecError, match=rf"big\.yaml: {MAX_SPEC_BYTES + 1} bytes"):
        load_spec(big)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(SpecError, match=r"latin\.yaml: not UTF-8 text"):
        load_spec(latin)


@pytest.mark.parametrize(("override", "words"), [
    ("mid_train.lr=nan", "mid_train.lr"),
    ("mid_train.lr=1e999", "mid_train.lr"),
    ("mid_train.max_steps=" + "9" * 5000, "not valid YAML"),
    ("mid_train.max_steps=&a [*a]", "nests deeper than 64 levels"),
    ("mid_train.max_steps=" + "[" * 100_000, "exceeded maximum nesting depth"),
    ("data.sources." + "9" * 5000 + ".n=1", "must be a list index"),
])
def test_a_hostile_override_is_a_spec_error(override: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        load_spec(SPEC, [override])
    assert words in str(err.value), str(err.value)[:300]
