"""The bounded memories behind the cache's deleted pods and nodes, the GPU policy's observed
pods and the owner lookups (``app.core.state.recent``)."""

from __future__ import annotations

import pytest

from app.core.state.recent import RecentKeys, RecentMap

#: (steps on a RecentMap of limit 3, keys left oldest first). Steps: ("put", key),
#: ("touch", key), ("discard", key).
MAP_ROWS = [
    ("under the limit: all kept", [("put", "a"), ("put", "b")], ["a", "b"]),
    ("past the limit: the oldest goes", [("put", k) for k in "abcd"], ["b", "c", "d"]),
    ("a put again is newest", [("put", "a"), ("put", "b"), ("put", "c"), ("put", "a"),
                               ("put", "d")], ["c", "a", "d"]),
    ("a touch is newest", [("put", "a"), ("put", "b"), ("put", "c"), ("touch", "a"),
                           ("put", "d")], ["c", "a", "d"]),
    ("a discard makes room", [("put", "a"), ("put", "b"), ("put", "c"), ("discard", "a"),
                              ("put", "d")], ["b", "c", "d"]),
    ("discarding an unknown key is nothing", [("put", "a"), ("discard", "x")], ["a"]),
]  # fmt: skip


@pytest.mark.parametrize(("steps", "left"), [r[1:] for r in MAP_ROWS],
                         ids=[r[0] for r in MAP_ROWS])  # fmt: skip
def test_a_recent_map_keeps_the_newest_entries(
    steps: list[tuple[str, str]], left: list[str]
) -> None:
    recent: RecentMap[str, int] = RecentMap(3)
    for n, (step, key) in enumerate(steps):
        if step == "put":
            recent.put(key, n)
        elif step == "touch":
            recent.touch(key)
        else:
            recent.discard(key)
    assert [k for k in "abcdx" if k in recent] == sorted(left)
    assert len(recent) == len(left)
    # the order: once full, each new key drops exactly the oldest of ``left``
    for n in range(recent.limit - len(left)):
        recent.put(f"filler-{n}", -1)
    for gone in left:
        assert gone in recent
        recent.put(f"new-{gone}", -1)
        assert gone not in recent


def test_a_recent_map_gives_stored_values_and_can_be_cleared() -> None:
    recent: RecentMap[str, int] = RecentMap(2)
    recent.put("a", 1)
    recent.put("a", 2)
    assert recent.get("a") == 2 and recent.get("b") is None
    assert recent
    recent.clear()
    assert not recent and len(recent) == 0


def test_recent_keys_say_whether_a_key_is_new() -> None:
    keys: RecentKeys[str] = RecentKeys(2)
    assert keys.add("a") is True
    assert keys.add("a") is False
    assert keys.add("b") and keys.add("c")
    assert "a" not in keys and "b" in keys and "c" in keys
    keys.discard("b")
    assert len(keys) == 1 and keys


@pytest.mark.parametrize("limit", [0, -1])
def test_a_limit_below_one_is_refused(limit: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RecentMap(limit)
