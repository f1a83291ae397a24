/* C reference kernels for the pmac memory and flop probes (probes/memory.py, probes/compute.py).
 *
 * Source: written for pmac; the loops are the same as the numba kernels, line for line.
 * Build:  gcc -O3 -march=native -fopenmp-simd -o memory_c memory.c -lm
 *         (-fopenmp-simd only honours the `omp simd reduction` pragmas, which give the C
 *          reductions the reassociation numba's fastmath=True gives the probe's kernels;
 *          no threads are used. flop_scalar carries optimize("no-tree-vectorize",
 *          "fp-contract=off"), and
 *          store/copy an empty asm memory barrier per sweep: see there.)
 *         or, as bench/probes/run uses it, a shared library whose exported pmac_c_* functions
 *         run the kernels on the caller's buffers (the probe's own numpy arrays):
 *         gcc -O3 -march=native -fopenmp-simd -shared -fPIC -o memory_c.so memory.c -lm
 * Usage:  memory_c KIND WORKING_SET_BYTES SWEEPS REPS
 *         KIND = load_unit | load_random | store | copy | flop_scalar | flop_simd | divsqrt | flop_independent | flop_fma
 * Prints one line per repetition: seconds for SWEEPS sweeps.
 *
 * Buffers: 2 MiB-aligned, and madvise(MADV_HUGEPAGE) from 4 MiB up, as numpy does for its
 * arrays, so transparent huge pages apply to both sides alike (setting: "madvise" or "always").
 * Working sets are counted as in probes/memory.py: load_random touches 8-byte data plus a
 * 4-byte index per element; copy touches both arrays.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void *buffer(size_t bytes) {
    size_t align = 2u << 20;
    void *p = aligned_alloc(align, (bytes + align - 1) / align * align);
    if (!p) { perror("aligned_alloc"); exit(1); }
    if (bytes >= (4u << 20)) madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

static volatile double sink;

/* One sweep's stores must happen: without this gcc interchanges the loops of store() and keeps
 * only the last sweep's value (LLVM, numba's back end, does not). No instruction is emitted. */
#define BARRIER() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) static double load_unit(const double *a, size_t n, long sweeps) {
    double s = 0.0;
    for (long r = 0; r < sweeps; r++) {
#pragma omp simd reduction(+:s)
        for (size_t i = 0; i < n; i++) s += a[i];
    }
    return s;
}

__attribute__((noinline)) static double load_random(const double *a, const int32_t *idx, size_t n, long sweeps) {
    double s = 0.0;
    for (long r = 0; r < sweeps; r++) {
#pragma omp simd reduction(+:s)
        for (size_t i = 0; i < n; i++) s += a[idx[i]];
    }
    return s;
}

__attribute__((noinline)) static double store(double *a, size_t n, long sweeps) {
    for (long r = 0; r < sweeps; r++) {
        double v = (double)r;
        for (size_t i = 0; i < n; i++) a[i] = v;
        BARRIER();
    }
    return a[0];
}

__attribute__((noinline)) static double copy(const double *a, double *b, size_t n, long sweeps) {
    for (long r = 0; r < sweeps; r++) {
        for (size_t i = 0; i < n; i++) b[i] = a[i];
        BARRIER();
    }
    return b[0];
}

#define POLY(v) v = v * c + e; v = v * c + e; v = v * c + e; v = v * c + e; \
                v = v * c + e; v = v * c + e; v = v * c + e; v = v * c + e;

/* gcc would vectorise this in-order reduction (fold-left) and contract to FMA; numba/LLVM
 * without fastmath keeps it scalar with separate multiply and add: same here. */
__attribute__((noinline, optimize("no-tree-vectorize", "fp-contract=off"))) static double flop_scalar(const double *x, size_t n, long reps, double c, double e) {
    double s = 0.0;
    for (long r = 0; r < reps; r++)
        for (size_t i = 0; i < n; i++) { double v = x[i]; POLY(v) s += v; }
    return s;
}

__attribute__((noinline)) static double flop_simd(const double *x, size_t n, long reps, double c, double e) {
    double s = 0.0;
    for (long r = 0; r < reps; r++) {
#pragma omp simd reduction(+:s)
        for (size_t i = 0; i < n; i++) { double v = x[i]; POLY(v) s += v; }
    }
    return s;
}

/* Eight independent multiply-adds of one element with different constants, summed in a tree
 * (probes/compute.py's _flop_independent: scalar, uncontracted, 24 flop an element). */
__attribute__((noinline, optimize("no-tree-vectorize", "fp-contract=off"))) static double flop_independent(const double *x, size_t n, long reps, double c, double e) {
    const double c1 = c * 0.5, c2 = c * 0.25, c3 = c * 0.75, c4 = c * 0.125, c5 = c * 0.375, c6 = c * 0.625, c7 = c * 0.875;
    const double e1 = e * 2.0, e2 = e * 3.0, e3 = e * 4.0, e4 = e * 5.0, e5 = e * 6.0, e6 = e * 7.0, e7 = e * 8.0;
    double s = 0.0;
    for (long r = 0; r < reps; r++)
        for (size_t i = 0; i < n; i++) {
            double v = x[i];
            s += (((v * c + e) + (v * c1 + e1)) + ((v * c2 + e2) + (v * c3 + e3))) +
                 (((v * c4 + e4) + (v * c5 + e5)) + ((v * c6 + e6) + (v * c7 + e7)));
        }
    return s;
}

/* Twelve accumulators, one fused multiply-add each an element (probes/compute.py's _flop_fma:
 * scalar, contracted, 24 flop an element; -march=native gives gcc the FMA where the core has it). */
__attribute__((noinline, optimize("no-tree-vectorize", "fp-contract=fast"))) static double flop_fma(const double *x, size_t n, long reps, double c) {
    double s0 = 0.0, s1 = 0.1, s2 = 0.2, s3 = 0.3, s4 = 0.4, s5 = 0.5;
    double s6 = 0.6, s7 = 0.7, s8 = 0.8, s9 = 0.9, s10 = 1.0, s11 = 1.1;
    for (long r = 0; r < reps; r++)
        for (size_t i = 0; i < n; i++) {
            double v = x[i];
            s0 = s0 * c + v; s1 = s1 * c + v; s2 = s2 * c + v; s3 = s3 * c + v;
            s4 = s4 * c + v; s5 = s5 * c + v; s6 = s6 * c + v; s7 = s7 * c + v;
            s8 = s8 * c + v; s9 = s9 * c + v; s10 = s10 * c + v; s11 = s11 * c + v;
        }
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) + ((s8 + s9) + (s10 + s11));
}

/* One divide and one square root per element, summed in order (scalar, as numba compiles
 * probes/compute.py's _divsqrt_scalar; gcc keeps sqrt scalar without -ffast-math anyway). */
__attribute__((noinline, optimize("no-tree-vectorize"))) static double divsqrt(const double *x, size_t n, long reps) {
    double s = 0.0;
    for (long r = 0; r < reps; r++)
        for (size_t i = 0; i < n; i++) { double v = x[i]; s += 1.0 / (v * __builtin_sqrt(v)); }
    return s;
}

/* Exported entry points for ctypes (the same kernels, on the caller's buffers). */
double pmac_c_load_unit(const double *a, size_t n, long sweeps) { return load_unit(a, n, sweeps); }
double pmac_c_load_random(const double *a, const int32_t *idx, size_t n, long sweeps) {
    return load_random(a, idx, n, sweeps);
}
double pmac_c_store(double *a, size_t n, long sweeps) { return store(a, n, sweeps); }
double pmac_c_copy(const double *a, double *b, size_t n, long sweeps) { return copy(a, b, n, sweeps); }
double pmac_c_flop_scalar(const double *x, size_t n, long reps) { return flop_scalar(x, n, reps, 0.999, 1e-4); }
double pmac_c_flop_simd(const double *x, size_t n, long reps) { return flop_simd(x, n, reps, 0.999, 1e-4); }
double pmac_c_divsqrt(const double *x, size_t n, long reps) { return divsqrt(x, n, reps); }
double pmac_c_flop_independent(const double *x, size_t n, long reps) { return flop_independent(x, n, reps, 0.999, 1e-4); }
double pmac_c_flop_fma(const double *x, size_t n, long reps) { return flop_fma(x, n, reps, 0.999); }

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s KIND WORKING_SET_BYTES SWEEPS REPS\n", argv[0]);
        return 2;
    }
    const char *kind = argv[1];
    size_t ws = strtoull(argv[2], 0, 10);
    long sweeps = atol(argv[3]), reps = atol(argv[4]);
    size_t per = !strcmp(kind, "load_random") ? 12 : !strcmp(kind, "copy") ? 16 : 8;
    size_t n = ws / per;
    int compute = !strncmp(kind, "flop", 4) || !strcmp(kind, "divsqrt");
    if (compute) n = 512;
    double *a = buffer(n * 8), *b = NULL;
    int32_t *idx = NULL;
    for (size_t i = 0; i < n; i++) a[i] = compute ? 0.5 + 0.5 * i / (n - 1) : 1.0;
    if (!strcmp(kind, "copy")) { b = buffer(n * 8); memset(b, 0, n * 8); }
    if (!strcmp(kind, "load_random")) {
        idx = buffer(n * 4);
        for (size_t i = 0; i < n; i++) idx[i] = (int32_t)i;
        srand(1);
        for (size_t i = n - 1; i > 0; i--) {  /* Fisher-Yates */
            size_t j = ((size_t)rand() * ((size_t)RAND_MAX + 1) + rand()) % (i + 1);
            int32_t t = idx[i]; idx[i] = idx[j]; idx[j] = t;
        }
    }
    for (long r = -1; r < reps; r++) {  /* r = -1: warm-up sweep, not printed */
        long sw = r < 0 ? 1 : sweeps;
        double t0 = now();
        if (!strcmp(kind, "load_unit")) sink = load_unit(a, n, sw);
        else if (!strcmp(kind, "load_random")) sink = load_random(a, idx, n, sw);
        else if (!strcmp(kind, "store")) sink = store(a, n, sw);
        else if (!strcmp(kind, "copy")) sink = copy(a, b, n, sw);
        else if (!strcmp(kind, "flop_scalar")) sink = flop_scalar(a, n, sw, 0.999, 1e-4);
        else if (!strcmp(kind, "flop_simd")) sink = flop_simd(a, n, sw, 0.999, 1e-4);
        else if (!strcmp(kind, "divsqrt")) sink = divsqrt(a, n, sw);
        else if (!strcmp(kind, "flop_independent")) sink = flop_independent(a, n, sw, 0.999, 1e-4);
        else if (!strcmp(kind, "flop_fma")) sink = flop_fma(a, n, sw, 0.999);
        else { fprintf(stderr, "unknown kind %s\n", kind); return 2; }
        double dt = now() - t0;
        if (r >= 0) printf("%.9e\n", dt);
    }
    return 0;
}
