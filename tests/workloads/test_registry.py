"""resolve(): names, entry points, mixes, and the errors for each."""

from __future__ import annotations

import pytest

from loadgen.errors import LoadgenError
from loadgen.workloads import BUILTINS, Mix, Workload, available, resolve


def test_builtins_resolve_with_descriptions() -> None:
    assert available()[:4] == list(BUILTINS)
    for name in BUILTINS:
        w = resolve(name)
        assert w.name == name and w.description


def test_unknown_name_lists_known_ones(plugin_dir) -> None:
    with pytest.raises(LoadgenError) as info:
        resolve("cdoe")
    text = str(info.value)
    assert "unknown workload 'cdoe'" in text
    for name in (*BUILTINS, "echo", "multi"):
        assert name in text


def test_entry_points(plugin_dir, wl) -> None:
    assert {"echo", "multi", "broken", "wrongtype"} <= set(available())
    echo = resolve("echo")
    assert isinstance(echo, Workload) and echo.name == "echo"  # unnamed class: labelled by its entry point
    assert wl.take(echo, 4, 2)[1].prompt == "Say 4-1 back to me."
    assert resolve("multi").name == "multi"  # a factory works too
    mixed = wl.take(resolve("echo:1,code:1"), 0, 200)
    assert {r.workload for r in mixed} == {"echo", "code"}


def test_entry_point_failures(plugin_dir) -> None:
    with pytest.raises(LoadgenError, match=r"entry point 'broken' \(lg_test_missing_module:Thing\) failed to import: ModuleNotFoundError"):
        resolve("broken")
    with pytest.raises(LoadgenError, match=r"entry point 'wrongtype' .* is a int, not a Workload subclass, instance or factory"):
        resolve("wrongtype")


@pytest.mark.parametrize("spec", ["code:0,chat:0", "code:-1,chat:2", "code:inf,chat:1", "code:nan"])
def test_mix_weights_must_sum_to_something_positive(spec: str) -> None:
    with pytest.raises(LoadgenError, match="weights must be non-negative numbers summing to more than 0"):
        resolve(spec)


def test_mix_shapes_and_errors() -> None:
    assert isinstance(resolve("code:2,chat:1"), Mix)
    assert resolve("code:2").name == "code"  # one component is just that workload
    assert resolve("code:1,chat:0").name == "code"  # zero weight drops a component...
    with pytest.raises(LoadgenError, match="unknown workload 'nope'"):
        resolve("code:1,nope:0")  # ...but it must still exist
    with pytest.raises(LoadgenError, match="'code' appears more than once"):
        resolve("code:1,code:2")
    with pytest.raises(LoadgenError, match="empty entry"):
        resolve("code:1,,chat:1")
    with pytest.raises(LoadgenError, match="unknown workload ''"):
        resolve("  ")
