"""pmac.reuse: exact stack distances, histograms, SHARDS sampling, associativity model."""

import numpy as np
import pytest

from pmac.memsig import COLD_BIN, N_REUSE_BINS, REUSE_BIN_EDGES_LINES, hit_fraction
from pmac.reuse import (burst_histograms, hit_fraction_assoc, level_fractions, reuse_histogram,
                        set_assoc_hit_prob, shards_filter, simulate_lru, stack_distances)


def lru_reference(lines):
    """Independent O(n * distinct) LRU stack: distance = position from the top."""
    stack, out = [], []
    for x in lines:
        if x in stack:
            i = stack.index(x)
            out.append(len(stack) - 1 - i)
            stack.pop(i)
        else:
            out.append(-1)
        stack.append(x)
    return np.array(out)


def test_hand_made_stream_distances_and_histogram():
    # A B C A B C D A: the second A/B/C see two distinct lines in between, the last A three
    lines = np.array([10, 20, 30, 10, 20, 30, 40, 10])
    assert stack_distances(lines).tolist() == [-1, -1, -1, 2, 2, 2, -1, 3]
    assert REUSE_BIN_EDGES_LINES[:5].tolist() == [0, 1, 2, 3, 4]
    stores = np.array([0, 0, 0, 1, 0, 0, 1, 0], bool)
    h = reuse_histogram(lines, stores)
    assert h.shape == (2, N_REUSE_BINS)
    # loads: cold A B C, distance 2 (B, C), distance 3 (A); stores: A at 2, D cold
    assert h[0, COLD_BIN] == 3 and h[0, 2] == 2 and h[0, 3] == 1 and h[0].sum() == 6
    assert h[1, 2] == 1 and h[1, COLD_BIN] == 1 and h[1].sum() == 2
    # immediate re-use is distance 0
    assert stack_distances(np.array([5, 5, 5])).tolist() == [-1, 0, 0]


def test_random_stream_matches_reference_across_compactions():
    rng = np.random.default_rng(3)
    lines = rng.integers(0, 2500, 12000) * 7919  # > 4096 accesses: time is compacted twice
    np.testing.assert_array_equal(stack_distances(lines), lru_reference(lines))


def test_cyclic_stream_grows_the_table():
    n = 40000  # more lines than the initial hash table holds at half load
    lines = np.tile(np.arange(n, dtype=np.int64) * 64, 3)
    d = stack_distances(lines)
    assert (d[:n] == -1).all() and (d[n:] == n - 1).all()


def test_two_level_hit_rates_equal_direct_lru_simulation():
    rng = np.random.default_rng(5)
    # a mix of a hot set, a warm set and a streaming sweep
    hot = rng.integers(0, 40, 20000)
    warm = rng.integers(1000, 1800, 20000)
    sweep = np.arange(20000) % 5000 + 10000
    lines = np.where(rng.random(20000) < 0.5, hot, np.where(rng.random(20000) < 0.6, warm, sweep))
    h = reuse_histogram(lines)[0]
    l1, l2 = 64, 1024  # powers of two are bin edges, so the binned model is exact here
    sim1 = simulate_lru(lines, l1, l1)
    sim2 = simulate_lru(lines, l2, l2)
    assert not (sim1 & ~sim2).any()  # LRU inclusion
    expect = np.array([sim1.mean(), (sim2 & ~sim1).mean(), (~sim2).mean()])
    got = level_fractions(h, [(l1, l1), (l2, l2)])
    np.testing.assert_allclose(got, expect, atol=1e-12)
    assert hit_fraction(h, l2) == pytest.approx(sim2.mean(), abs=1e-12)


def test_shards_sampling_error_is_bounded():
    rng = np.random.default_rng(7)
    lines = rng.integers(0, 100_000, 1_000_000)
    exact = reuse_histogram(lines)[0]
    samp = reuse_histogram(lines, sample_rate=0.05)[0]
    assert samp.sum() == pytest.approx(exact.sum(), rel=0.03)
    for c in (1024, 8192, 65536):
        assert abs(hit_fraction(samp, c) - hit_fraction(exact, c)) < 0.01
    keep = shards_filter(lines, 0.05)
    assert keep.mean() == pytest.approx(0.05, abs=0.01)
    # spatial: a line is either always or never sampled
    assert len(set(lines[keep]) & set(lines[~keep])) == 0


def test_associativity_model_against_set_associative_simulation():
    # Smith's binomial model assumes random placement. Measured on a random stream over 3000
    # lines: 0.08 pp (512 lines, 8 ways), 0.03 pp (1024, 16) but -4.4 pp at 2048 lines 4-way,
    # where the working set is 1.5x the cache: the binomial tail ignores that a set only
    # holds its own few lines, so it overstates conflict misses when the sets are nearly full.
    rng = np.random.default_rng(11)
    lines = rng.integers(0, 3000, 200_000)
    h = reuse_histogram(lines)[0]
    for cache_lines, ways, tol in ((512, 8, 0.002), (1024, 16, 0.002), (2048, 4, 0.05)):
        sim = simulate_lru(lines, cache_lines, ways).mean()
        model = hit_fraction_assoc(h, cache_lines, ways, placement="random")
        assert abs(model - sim) < tol, (cache_lines, ways, model, sim)
    # contiguous data fills the sets evenly: the balanced model is exact, the binomial one
    # is ~40 pp too pessimistic (bench/reuse_distance prints these errors)
    sweep = np.arange(100_000) % 460
    hs = reuse_histogram(sweep)[0]
    sim = simulate_lru(sweep, 512, 8).mean()
    assert hit_fraction_assoc(hs, 512, 8) == pytest.approx(sim, abs=1e-9)
    assert hit_fraction_assoc(hs, 512, 8, placement="random") < sim - 0.3
    with pytest.raises(ValueError, match="placement"):
        hit_fraction_assoc(hs, 512, 8, placement="lru")
    # the fully-associative limit is the plain step function
    assert set_assoc_hit_prob(np.array([0, 3, 4, 9]), 1, 4).tolist() == [1, 1, 0, 0]
    assert set_assoc_hit_prob(np.array([3]), 1000, 4)[0] == pytest.approx(1.0)


def test_burst_histograms_from_tool_words():
    marker = np.uint64(1 << 63)
    # burst 0: load A, load B; burst 1: load A (distance 1), store B (distance 1)
    a, b = 100, 101
    words = np.array([marker | np.uint64(0), a << 1, b << 1, marker | np.uint64(1), a << 1, (b << 1) | 1],
                     dtype=np.uint64)
    h = burst_histograms(words, 2, 32, 1.0)
    assert h[0, 0, COLD_BIN] == 2 and h[0].sum() == 2
    assert h[1, 0, 1] == 1 and h[1, 1, 1] == 1 and h[1].sum() == 2
    # at 64-byte lines A (100) and B (101) share a line: B hits at distance 0
    h64 = burst_histograms(words, 2, 64, 4.0)
    assert h64[0, 0, COLD_BIN] == 4 and h64[0, 0, 0] == 4   # scaled by 1/R = 4
    with pytest.raises(ValueError, match="burst 1 of 1"):
        burst_histograms(words, 1, 32, 1.0)


def test_accesses_inside_mpi_calls_move_the_stack_and_count_nowhere():
    """Words after an outside marker (pmac_vg: the accesses inside an MPI call) push the bursts'
    lines down the stacks, data and code alike, and add to no burst's or function's histogram."""
    from pmac.reuse import FETCH_BIT, FN_SHIFT, OUTSIDE_MARK, BurstHistograms

    marker, out, f1 = np.uint64(1 << 63), np.uint64(OUTSIDE_MARK), np.uint64(1 << FN_SHIFT)
    fetch = np.uint64(1 << FETCH_BIT)
    a, b, c, d = 100, 200, 300, 400
    # burst 0: load A, fetch code C; MPI call: loads B twice, stores D, fetches code D (function 1)
    # burst 1: load A (distance 2: B and D since), fetch C (distance 1: code D)
    words = np.array([marker, a << 1, fetch | np.uint64(c << 1),
                      out, f1 | np.uint64(b << 1), f1 | np.uint64(b << 1), f1 | np.uint64((d << 1) | 1),
                      fetch | f1 | np.uint64(d << 1),
                      marker | np.uint64(1), a << 1, fetch | np.uint64(c << 1)], dtype=np.uint64)
    bh = BurstHistograms(32, 1.0)
    for part in np.split(words, [4, 6]):              # chunks cut inside the call too
        bh.feed(part)
    h, fh = bh.result(2), bh.function_result(2)
    assert h[0, 0, COLD_BIN] == 1 and h[0, 2, COLD_BIN] == 1 and h[0].sum() == 2
    assert h[1, 0, 2] == 1 and h[1, 2, 1] == 1 and h[1].sum() == 2
    assert fh[1].sum() == 0 and fh[0].sum() == 4
    # without the call's accesses both would be at distance 0
    h0 = burst_histograms(np.concatenate([words[:3], words[8:]]), 2, 32, 1.0)
    assert h0[1, 0, 0] == 1 and h0[1, 2, 0] == 1


def test_chunked_feeding_equals_one_pass():
    from pmac.reuse import BurstHistograms, StackState

    rng = np.random.default_rng(13)
    lines = rng.integers(0, 9000, 30000)
    st = StackState()
    parts = np.split(lines, [1, 5000, 5001, 17000])
    np.testing.assert_array_equal(np.concatenate([st.distances(p) for p in parts]), stack_distances(lines))
    marker = np.uint64(1 << 63)
    words = (lines.astype(np.uint64) << np.uint64(1)) | (rng.random(30000) < 0.3).astype(np.uint64)
    words = np.insert(words, [0, 10000, 20000, 20000], [marker | np.uint64(b) for b in (0, 1, 2, 3)])
    one = burst_histograms(words, 4, 64, 2.0)
    bh = BurstHistograms(64, 2.0)
    for p in np.split(words, [3, 10001, 10002, 25000]):  # chunks cut right after a marker too
        bh.feed(p)
    np.testing.assert_array_equal(bh.result(4), one)
    assert one[2].sum() == 0 and one[3].sum() == 2.0 * 10000


def test_function_ids_in_words_give_per_function_histograms():
    """Bits 44-62 of an access word name the function (pmac_vg.c): histograms per function use
    the one LRU stack of the whole stream, and the address is read without those bits."""
    from pmac.reuse import FN_SHIFT, BurstHistograms

    marker = np.uint64(1 << 63)
    f1, f2 = np.uint64(1 << FN_SHIFT), np.uint64(2 << FN_SHIFT)
    a, b = 100, 300
    # burst 0: f1 loads A, f2 loads B, f2 loads A (distance 1), f1 stores B (distance 1)
    words = np.array([marker, f1 | np.uint64(a << 1), f2 | np.uint64(b << 1), f2 | np.uint64(a << 1),
                      f1 | np.uint64((b << 1) | 1)], dtype=np.uint64)
    bh = BurstHistograms(32, 1.0)
    bh.feed(words)
    h, fh = bh.result(1), bh.function_result(3)
    assert h[0, 0, COLD_BIN] == 2 and h[0, 0, 1] == 1 and h[0, 1, 1] == 1      # as without ids
    assert fh[0].sum() == 0
    assert fh[1, 0, COLD_BIN] == 1 and fh[1, 1, 1] == 1 and fh[1].sum() == 2    # f1: cold load, store at 1
    assert fh[2, 0, COLD_BIN] == 1 and fh[2, 0, 1] == 1 and fh[2].sum() == 2    # f2: cold load, load at 1
    np.testing.assert_array_equal(fh.sum(axis=0), h[0])
    with pytest.raises(ValueError, match="beyond the 2 the summary lists"):
        bh.function_result(2)


def test_burst_histograms_equal_an_independent_lru_stack():
    """The one-pass word analysis (repeated lines skip the stack; small distances binned by a
    lookup table, large ones by search) equals binning the reference LRU stack's distances; the
    fetch words (bit 62) interleaved with the data have a stack of their own (access kind 2)."""
    from pmac.memsig import ACCESS_FETCH, reuse_bin
    from pmac.reuse import FETCH_BIT, FN_SHIFT, BurstHistograms

    rng = np.random.default_rng(17)
    walk = np.repeat(rng.integers(0, 3000, 3000), rng.integers(1, 6, 3000))   # runs of one line
    cyclic = np.tile(np.arange(4500) * 3, 2)           # distances 4499 (past the lookup table)
    addr32 = np.concatenate([walk, cyclic, walk[:2000]]).astype(np.int64)
    n = addr32.size
    # every third access outside the cyclic part is a fetch, of the same addresses (only separate
    # stacks give the reference's distances)
    fetch = (np.arange(n) % 3 == 1) & ((np.arange(n) < walk.size) | (np.arange(n) >= walk.size + cyclic.size))
    stores = (rng.random(n) < 0.3) & ~fetch
    fns = rng.integers(0, 5, n)
    burst = np.searchsorted([0, 5000, 9000], np.arange(n), side="right") - 1
    words = (addr32.astype(np.uint64) << np.uint64(1)) | stores.astype(np.uint64) | \
        (fns.astype(np.uint64) << np.uint64(FN_SHIFT)) | (fetch.astype(np.uint64) << np.uint64(FETCH_BIT))
    marker = np.uint64(1 << 63)
    words = np.insert(words, [0, 5000, 9000], [marker | np.uint64(b) for b in (0, 1, 2)])
    kind = np.where(fetch, ACCESS_FETCH, stores.astype(int))
    for line, scale in ((32, 1.0), (64, 2.0), (256, 16.0)):
        lines = addr32 // (line // 32)
        d = np.empty(n, np.int64)
        for part in (fetch, ~fetch):
            d[part] = lru_reference(lines[part].tolist())
        k = reuse_bin(np.where(d < 0, -1, d * int(scale)))
        want = np.zeros((3, 3, N_REUSE_BINS))
        fwant = np.zeros((5, 3, N_REUSE_BINS))
        np.add.at(want, (burst, kind, k), scale)
        np.add.at(fwant, (fns, kind, k), scale)
        bh = BurstHistograms(line, scale)
        for part in np.array_split(words, 7):
            bh.feed(part)
        np.testing.assert_array_equal(bh.result(3), want)
        np.testing.assert_array_equal(bh.function_result(5), fwant)
        assert want[:, ACCESS_FETCH].sum() == scale * fetch.sum()
        if line == 32:
            assert (d >= 4096).sum() >= 4000 and (d == 0).sum() > 4000   # both paths exercised
