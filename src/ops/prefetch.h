#pragma once
// Row passes that compute much on a part of each row of a wide matrix: the SGU's GELU
// of one half of U. Where the part is 4 KB and rows are 8 KB apart (the annotated
// model's d_ffn = 2048, split in two), every part is a page of its own, and the CPU's
// prefetcher, which follows a stream within a page, started again at every row: GELU
// over one half of the annotated model's U (64 MB) took 2.7 ms from memory against 1.2
// in cache, and 1.2 with the next row's part requested ahead (2 threads, Zen 5). Where
// the work per value is light the pass runs at the memory's speed without it, and the
// requests cost time: the bias gradient's column sums over the same halves (a 4 KB
// slice of each row per thread) took 1.6-1.7 ms plain and 1.9-2.3 ahead; a contiguous
// stream of rows gained nothing either.

namespace gmlp::ops {

// f(c) for c in [0, n), a cache line (16 floats) at a time, each line's twin at `ahead`
// (the same part of the next row this thread reads) requested from memory as it goes.
// The arithmetic is the plain vector loop's: the same bits.
template <typename F>
inline void row_ahead(int n, const float* ahead, F f) {
  int c0 = 0;
  for (; c0 + 16 <= n; c0 += 16) {
    __builtin_prefetch(ahead + c0);
#pragma omp simd
    for (int c = c0; c < c0 + 16; ++c) f(c);
  }
#pragma omp simd
  for (int c = c0; c < n; ++c) f(c);
}

}  // namespace gmlp::ops
