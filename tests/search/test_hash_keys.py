"""The content-hash keys a scope's index keeps so that a write asks the database for a draft's exact
duplicates only when one may be stored: every key added is found, at any size, and the keys of a first load
are the keys one at a time."""

from __future__ import annotations

import hashlib

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from autogen_shared_memory.core.lifecycle import content_hash
from autogen_shared_memory.search.index import HashKeys, hash_key, hash_keys

_KEY = st.integers(0, 2**60 - 1)


@settings(max_examples=60, deadline=None)
@given(
    base=st.lists(_KEY, max_size=300),
    steps=st.lists(st.lists(_KEY, max_size=2000), max_size=8),
    absent=st.lists(_KEY, max_size=50),
)
@example(base=[], steps=[list(range(5000))], absent=[5000, 2**60 - 1])  # past the fold of an empty base
def test_every_key_added_is_found_and_no_other(base: list[int], steps: list[list[int]], absent: list[int]) -> None:
    keys = HashKeys(np.sort(np.array(base, dtype=np.int64)))
    held = set(base)
    for step in steps:
        keys.add(step)
        held.update(step)
        assert len(keys.extra) <= max(4096, len(keys.base) // 8)  # a long-lived writer's keys are folded
        assert all(k in keys for k in step)
    assert all(k in keys for k in held)
    assert not any(k in keys for k in set(absent) - held)
    saved = keys.keys()
    assert np.all(np.diff(saved) >= 0) and set(saved.tolist()) == held


_HEXISH = st.text(alphabet="0123456789abcdefABCDEF", max_size=20)


@given(st.lists(st.one_of(_HEXISH, st.text(max_size=20), st.text().map(content_hash)), max_size=40))
@example(
    ["", "0" * 15, "f" * 64, "0123456789abcdeF", "0123456789ABCDE", "0123456789abcd", "é" * 20, "0123456789abcde\x00"]
)
def test_a_first_loads_keys_are_the_keys_one_at_a_time(hashes: list[str]) -> None:
    assert hash_keys(hashes).tolist() == [hash_key(h) for h in hashes]


def test_a_key_is_the_first_sixty_bits_of_the_hash() -> None:
    digest = hashlib.sha256(b"x").hexdigest()
    assert hash_key(digest) == int(digest[:15], 16) == int(hash_keys([digest])[0])
