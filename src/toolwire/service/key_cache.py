"""`KeyCache`: API keys that passed the database check recently, so a busy client skips a round trip.

Revocation stays bounded: an entry lives at most `ttl` seconds, the admin API empties the cache of
its process when it changes keys, users or scopes, and a key that failed is never remembered.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolwire.service.auth import Principal

__all__ = ["KeyCache"]


class KeyCache:
    """The principals of keys that passed the database check recently, each for at most `ttl` seconds.

    Entries are found by the SHA-256 of the whole key, so neither a key nor its secret is held,
    and a wrong secret for a known key id never matches. The least recently used entry goes first
    when `size` are held.
    """

    def __init__(self, ttl: float, size: int = 10_000) -> None:
        self.ttl = ttl
        self.size = size
        self._entries: OrderedDict[bytes, tuple[float, Principal]] = OrderedDict()

    def get(self, key: str) -> Principal | None:
        """The principal remembered for `key`, or `None` when there is none or it expired."""
        if self.ttl <= 0:
            return None
        digest = hashlib.sha256(key.encode()).digest()
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry[0] <= time.monotonic():
            del self._entries[digest]
            return None
        self._entries.move_to_end(digest)
        return entry[1]

    def put(self, key: str, principal: Principal) -> None:
        """Remember the principal of a key that just passed the database check."""
        if self.ttl <= 0:
            return
        digest = hashlib.sha256(key.encode()).digest()
        self._entries[digest] = (time.monotonic() + self.ttl, principal)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every key: the next request of each is checked in the database again."""
        self._entries.clear()
