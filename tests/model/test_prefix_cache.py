"""The page pool and prefix cache: what a hit, a miss, a partial page, eviction, flush and
reference counting do (pure bookkeeping, no model)."""

import pytest

from det_suite.engine.prefix_cache import CacheFullError, PagePool, page_keys

pytestmark = pytest.mark.model

PAGE = 4


def _cached_request(pool: PagePool, tokens) -> list[int]:
    """Run one request's bookkeeping: allocate its pages, cache them, release them."""
    pages = pool.allocate(-(-len(tokens) // PAGE))
    pool.commit(tokens, pages)
    pool.release(pages)
    return pages


@pytest.mark.parametrize("tokens, limit, expected_pages", [
    pytest.param(list(range(12)), 12, 3, id="whole-prompt-hit"),
    pytest.param(list(range(12)) + [99, 98], 14, 3, id="longer-prompt-hits-its-prefix"),
    pytest.param(list(range(12)), 11, 2, id="limit-stops-before-a-page"),
    pytest.param(list(range(10)), 10, 2, id="partial-last-page-not-matched"),
    pytest.param(list(range(8)) + [77, 9, 10, 11], 12, 2, id="divergence-inside-third-page"),
    pytest.param(list(range(7)) + [77, 8, 9, 10, 11], 12, 1,
                 id="divergence-at-a-pages-last-token"),
    pytest.param([1000] + list(range(1, 12)), 12, 0, id="first-token-differs-miss"),
])
def test_match_returns_the_cached_full_pages_of_the_shared_prefix(tokens, limit,
                                                                   expected_pages):
    pool = PagePool(16, PAGE)
    pages = _cached_request(pool, list(range(12)))
    assert pool.match(tokens, limit) == pages[:expected_pages]


def test_keys_chain_over_the_whole_prefix():
    a = page_keys([1, 2, 3, 4, 5, 6, 7, 8], PAGE)
    b = page_keys([9, 2, 3, 4, 5, 6, 7, 8], PAGE)
    assert a[1] != b[1], "the same second page after a different first page must not match"


def test_only_full_pages_are_cached():
    pool = PagePool(16, PAGE)
    _cached_request(pool, list(range(10)))          # 2 full pages + 2 tokens
    assert pool.stats().cached == 2
    assert pool.stats().free == 16 - 1 - 2


def test_acquired_pages_are_counted_and_survive_eviction_pressure():
    pool = PagePool(5, PAGE)                        # 4 usable pages
    pages = _cached_request(pool, list(range(8)))   # 2 cached, evictable
    hit = pool.match(list(range(8)), 8)
    pool.acquire(hit)
    assert [pool.refcount(p) for p in pages] == [1, 1]
    with pytest.raises(CacheFullError, match="num_pages"):
        pool.allocate(3)                            # 2 free, the 2 cached ones are in use
    assert pool.match(list(range(8)), 8) == pages
    pool.release(hit)
    assert pool.stats().evictable == 2


def test_eviction_takes_least_recently_released_and_deepest_page_first():
    pool = PagePool(7, PAGE)                        # 6 usable pages
    old = _cached_request(pool, list(range(8)))
    new = _cached_request(pool, list(range(100, 108)))
    assert pool.stats().free == 2
    pool.allocate(3)                                # 2 free + evicts old's tail page
    assert pool.match(list(range(8)), 8) == old[:1]
    assert pool.match(list(range(100, 108)), 8) == new


def test_flush_forgets_every_prefix_and_frees_every_page():
    pool = PagePool(8, PAGE)
    _cached_request(pool, list(range(8)))
    pool.flush()
    assert pool.match(list(range(8)), 8) == []
    assert pool.stats().free == 7 and pool.stats().cached == 0


def test_flush_is_refused_while_pages_are_in_use():
    pool = PagePool(8, PAGE)
    pool.allocate(1)
    with pytest.raises(RuntimeError, match="in use"):
        pool.flush()


def test_duplicate_prefix_keeps_the_first_page_and_frees_the_second():
    pool = PagePool(8, PAGE)
    first = _cached_request(pool, list(range(4)))
    second = pool.allocate(1)
    assert pool.commit(list(range(4)), second) == 0
    pool.release(second)
    assert pool.match(list(range(4)), 4) == first
    assert pool.stats().cached == 1


def test_release_more_often_than_acquired_is_an_error():
    pool = PagePool(8, PAGE)
    pages = pool.allocate(1)
    pool.release(pages)
    with pytest.raises(RuntimeError, match="released more often"):
        pool.release(pages)


@pytest.mark.parametrize("num_pages, page_size, match", [
    pytest.param(1, 4, "num_pages", id="no-page-beside-scratch"),
    pytest.param(8, 0, "page_size", id="zero-page-size"),
])
def test_bad_pool_arguments_are_named(num_pages, page_size, match):
    with pytest.raises(ValueError, match=match):
        PagePool(num_pages, page_size)
