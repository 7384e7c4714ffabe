"""Fuzz the agent-spec loader: YAML files and `--set KEY=VALUE` overrides.

Inputs: the shipped venus-tiny spec with structural edits (values replaced by hostile YAML values,
keys deleted or added, values wrapped), its YAML text with textual edits (anchors, aliases, tags
such as `!!python/object`, merge keys, tabs, directives, flow brackets), alias bombs, and random
overrides (on an edited file or the real one). Documented error: `SpecError`, whose message names
the file. An accepted spec dumps to YAML that loads back to the same spec.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from fuzz_helpers import (BUDGETS, HUGE_INT_TEXT, JSON_VALUES, Budget, fuzz, mutated, mutated_text,
                          yaml_alias_bomb)
from hypothesis import strategies as st

from venus_core.config.loader import SpecError, dump_spec, load_spec, read_spec_dict

ROOT = Path(__file__).resolve().parents[2]
SPEC_FILE = ROOT / "agents" / "venus-tiny" / "agent.yaml"
SPEC_TEXT = SPEC_FILE.read_text(encoding="utf-8")
SPEC_DATA = read_spec_dict(SPEC_FILE)[0]

YAML_TOKENS = st.sampled_from([
    "&a ", "*a", "<<: *a\n", "!!python/object/apply:os.system ['true']", "!!binary AAAA", "!!float nan",
    "!!int " + HUGE_INT_TEXT, ".inf", "-.nan", "0x1f", "0o17", "1_000", "2026-12-02", "~", "? ", ": ", "- ",
    "\t", "%YAML 1.1\n", "---\n", "...\n", "{", "}", "[", "]", "'", '"', "|\n", ">-\n", "#", "\ufeff", "\x00",
    "\x85", "\u2028", "1e999", "yes", "off", "=", ",", "\n  ", "\n    x: 1\n",
])


def _bomb(levels: int, fanout: int) -> str:
    return yaml_alias_bomb(levels, fanout, "mid_train: {{max_steps: {alias}}}")


def _yaml(data: object) -> str:
    try:
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    except (yaml.YAMLError, ValueError, TypeError):
        return SPEC_TEXT


SPEC_TEXTS = st.one_of(
    st.just(SPEC_TEXT),
    mutated(SPEC_DATA, 4).map(_yaml),
    mutated_text(SPEC_TEXT, 6),
    st.builds(lambda t, at, tok: t[:at] + tok + t[at:], st.just(SPEC_TEXT), st.integers(0, len(SPEC_TEXT)),
              YAML_TOKENS),
    st.builds(_bomb, st.integers(2, 9), st.integers(2, 9)),
    st.text(max_size=200),
    st.just("&a [*a]\n"), st.just("mid_train: &m {max_steps: 3, x: *m}\n"),
)
KEYS = st.sampled_from(["mid_train.max_steps", "model.base", "data.sources.0.n", "offline_rl.grounding.lr",
                        "merge.weights.web", "a.b.c", "model", "", ".", "x..y", "data.sources.99", "eval.suites.0",
                        "model.tiny.image_size", "mid_train.max_steps.x", "data.sources." + HUGE_INT_TEXT])
VALUES = st.one_of(st.sampled_from(["", "1", "1e-6", "nan", ".inf", "[1, 2", "{a: 1}", "!!python/name:os.system",
                                    HUGE_INT_TEXT, "&a [*a]", "null", "- x", "'unterminated"]),
                   JSON_VALUES.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip()
                                   if not isinstance(v, float) else repr(v)),
                   st.text(max_size=20))
OVERRIDES = st.lists(st.one_of(st.builds(lambda k, v: f"{k}={v}", KEYS, VALUES), st.text(max_size=30)),
                     max_size=3)


def check_spec(args: tuple[str, list[str]]) -> str:
    text, overrides = args
    with tempfile.TemporaryDirectory(prefix="venus-fuzz-spec-") as d:
        path = Path(d) / "agent.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            spec = load_spec(path, overrides)
        except SpecError as exc:
            assert str(path) in str(exc) or "override" in str(exc), f"error does not name the file: {exc}"
            return "SpecError"
        path.write_text(dump_spec(spec), encoding="utf-8")
        assert load_spec(path) == spec
    return "accepted"


@pytest.mark.parametrize("budget", BUDGETS)
def test_agent_spec_loader(budget: Budget) -> None:
    tally = fuzz("agent-spec loader", st.tuples(SPEC_TEXTS, OVERRIDES), check_spec, budget)
    assert tally.outcomes["accepted"] > 0 and tally.outcomes["SpecError"] > 0
