"""The fetch path's caches are bounded: the chunk cache by bytes (least recently used first), the identity
memo by entries, finding the same object only."""

from __future__ import annotations

from rsm.fetch.cache import ByteLRU, IdentityMemo


def test_byte_lru_is_bounded_by_bytes() -> None:
    cache: ByteLRU[bytes] = ByteLRU(100)
    for i in range(10):
        cache.put(i, bytes(30))
    assert cache.bytes <= 100 and len(cache) == 3 and cache.get(9) is not None and cache.get(0) is None
    cache.get(7)
    cache.put("x", bytes(30))
    assert cache.get(7) is not None and cache.get(8) is None
    cache.put("huge", bytes(101))
    assert cache.get("huge") is None and cache.bytes <= 100


def test_identity_memo_finds_the_same_object_only_and_is_bounded() -> None:
    memo: IdentityMemo[list[int], str] = IdentityMemo(2)
    a, b = [1], [1]
    memo.put(a, "a")
    assert memo.get(a) == "a" and memo.get(b) is None  # equal but another object: not found
    memo.put(b, "b")
    c = [1]
    memo.put(c, "c")  # full: cleared first, so only c is left
    assert len(memo) == 1 and memo.get(c) == "c" and memo.get(a) is None
    memo.clear()
    assert memo.get(c) is None
