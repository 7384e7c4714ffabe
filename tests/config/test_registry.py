from __future__ import annotations

import pytest

from venus_core.config.registry import Registry, RegistryError, registry, registry_kinds


def test_register_get_and_list() -> None:
    reg: Registry[object] = Registry("things", "test things")

    @reg.register("b")
    def b() -> None:
        """The b thing."""

    reg.register("a", 42, description="the answer")
    assert reg.names() == ["a", "b"]
    assert reg.get("a") == 42 and reg.get("b") is b
    assert reg.entry("b").description == "The b thing."
    assert "a" in reg and "zzz" not in reg and len(reg) == 2


def test_duplicate_name_is_an_error() -> None:
    reg: Registry[int] = Registry("things", "")
    reg.register("x", 1)
    with pytest.raises(RegistryError, match="already registered"):
        reg.register("x", 2)


def test_unknown_name_lists_known_ones() -> None:
    reg: Registry[int] = Registry("things", "")
    reg.register("alpha", 1)
    reg.register("beta", 2)
    with pytest.raises(RegistryError, match=r"unknown things 'gamma'; known: alpha, beta"):
        reg.get("gamma")


@pytest.mark.parametrize("bad", ["", " padded", "x "])
def test_invalid_names(bad: str) -> None:
    with pytest.raises(RegistryError):
        Registry("things", "").register(bad, 1)


def test_unknown_registry_kind() -> None:
    with pytest.raises(RegistryError, match="known: .*rewards"):
        registry("nope")
    assert {"rewards", "envs", "judges", "merge_methods", "importers"} <= set(registry_kinds())


def test_plugins_register_real_pieces() -> None:
    assert {"grounding", "navigation_mobile", "navigation_web"} <= set(registry("rewards").names())
    assert {"mobile", "web"} <= set(registry("action_spaces").names())
