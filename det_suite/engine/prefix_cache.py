"""The page pool of the paged KV cache and the prefix cache over it.

A page holds the K/V of `page_size` consecutive tokens of one sequence. A full page is
identified by a hash chain over the token ids up to its end (the digest of the previous
page's key and this page's tokens), so a page is reused only by a prompt whose whole prefix
up to that page is the same: equal keys mean equal KV. The chain is a SHA-256 digest, so two
different prefixes never share a key in practice and lookup needs no tree.

Pages in use carry a reference count. A cached page whose count drops to 0 stays cached but
evictable, least recently released first; when a request is released its pages enter that
order tail first, so a prefix's deepest page is evicted before the pages it extends. Page 0
.. reserved-1 are never handed out (the engine uses page 0 as scratch for padded rows).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from dataclasses import dataclass

ROOT_KEY = b"det-suite/prefix-cache/v1"


class CacheFullError(RuntimeError):
    """Not enough free or evictable pages for a request."""


def page_keys(tokens, page_size: int, pages: int | None = None) -> list[bytes]:
    """The chain keys of the first `pages` full pages of `tokens` (all full pages if None)."""
    full = len(tokens) // page_size
    count = full if pages is None else min(pages, full)
    keys, parent = [], ROOT_KEY
    for i in range(count):
        chunk = array("q", tokens[i * page_size:(i + 1) * page_size]).tobytes()
        parent = hashlib.sha256(parent + chunk).digest()
        keys.append(parent)
    return keys


@dataclass(frozen=True)
class PoolStats:
    total: int          # pages that can be handed out (excludes reserved pages)
    free: int           # never used or released uncached
    evictable: int      # cached, reference count 0
    in_use: int         # reference count > 0
    cached: int         # pages with a key (in use or evictable)


class PagePool:
    def __init__(self, num_pages: int, page_size: int, *, reserved: int = 1) -> None:
        if not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size: expected an int >= 1, got {page_size!r}")
        if not isinstance(num_pages, int) or num_pages <= reserved:
            raise ValueError(f"num_pages: expected an int > {reserved} (page 0 is scratch), "
                             f"got {num_pages!r}")
        self.num_pages, self.page_size, self.reserved = num_pages, page_size, reserved
        self._refcount = [0] * num_pages
        self._free: deque[int] = deque(range(reserved, num_pages))
        self._page_of: dict[bytes, int] = {}
        self._key_of: dict[int, bytes] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()

    # -- lookup -----------------------------------------------------------------------------
    def match(self, tokens, limit: int) -> list[int]:
        """Cached pages covering the longest page-aligned prefix of tokens[:limit]."""
        pages = []
        for key in page_keys(tokens[:max(limit, 0)], self.page_size):
            page = self._page_of.get(key)
            if page is None:
                break
            pages.append(page)
        return pages

    # -- reference counting ---------------------------------------------------------------
    def acquire(self, pages) -> None:
        for page in pages:
            if self._refcount[page] == 0:
                if page not in self._evictable:
                    raise RuntimeError(f"page {page} is neither in use nor cached")
                del self._evictable[page]
            self._refcount[page] += 1

    def allocate(self, count: int) -> list[int]:
        """`count` fresh pages (reference count 1), evicting least recently used cached ones."""
        if count > len(self._free) + len(self._evictable):
            raise CacheFullError(
                f"the KV cache needs {count} more pages but only {len(self._free)} are free and "
                f"{len(self._evictable)} evictable (num_pages={self.num_pages}, page_size="
                f"{self.page_size}); raise num_pages or send fewer/shorter requests at once")
        pages = []
        for _ in range(count):
            if self._free:
                page = self._free.popleft()
            else:
                page, _ = self._evictable.popitem(last=False)
                del self._page_of[self._key_of.pop(page)]
            self._refcount[page] = 1
            pages.append(page)
        return pages

    def release(self, pages) -> None:
        """Drop one reference to each page; released tail first (see the module docstring)."""
        for page in reversed(list(pages)):
            if self._refcount[page] <= 0:
                raise RuntimeError(f"page {page} released more often than acquired")
            self._refcount[page] -= 1
            if self._refcount[page] == 0:
                if page in self._key_of:
                    self._evictable[page] = None
                else:
                    self._free.append(page)

    # -- caching --------------------------------------------------------------------------
    def commit(self, tokens, pages) -> int:
        """Register the full pages of `tokens` (whose KV is in `pages`) in the prefix cache.
        A prefix already cached on another page keeps that page. Returns pages newly cached."""
        added = 0
        for key, page in zip(page_keys(tokens, self.page_size), pages):
            if key in self._page_of or page in self._key_of:
                continue
            self._page_of[key] = page
            self._key_of[page] = key
            added += 1
        return added

    def flush(self) -> None:
        """Forget every cached prefix. Refused while any page is in use."""
        in_use = sum(1 for count in self._refcount if count > 0)
        if in_use:
            raise RuntimeError(f"flush: {in_use} pages are still in use by running requests")
        self._page_of.clear()
        self._key_of.clear()
        self._evictable.clear()
        self._free = deque(range(self.reserved, self.num_pages))

    def refcount(self, page: int) -> int:
        return self._refcount[page]

    def stats(self) -> PoolStats:
        in_use = sum(1 for count in self._refcount if count > 0)
        return PoolStats(total=self.num_pages - self.reserved, free=len(self._free),
                         evictable=len(self._evictable), in_use=in_use,
                         cached=len(self._key_of))
