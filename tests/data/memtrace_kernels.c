/* Known kernels for tests/test_memtrace.py. Between client requests that mimic the PMPI shim
 * (ENTER(k)/EXIT(k) = MPI call k), burst k+1 runs exactly one kernel:
 *   burst 1: daxpy   (scalar: 2 loads, 1 store, 1 mul + 1 add per element)
 *   burst 2: vfma256 (AVX2 FMA: 4 doubles per instruction, 2 flop per lane)
 *   burst 3: axpy128 (SSE2 packed doubles: mul + add on 2 lanes)
 * Build: gcc -O2 -mavx2 -mfma -ffp-contract=off -fno-tree-vectorize */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <valgrind/valgrind.h>
#define ENTER(s) VALGRIND_DO_CLIENT_REQUEST_STMT(VG_USERREQ_TOOL_BASE('P', 'M') + 0, (s), 0, 0, 0, 0)
#define EXIT(s) VALGRIND_DO_CLIENT_REQUEST_STMT(VG_USERREQ_TOOL_BASE('P', 'M') + 1, (s), 0, 0, 0, 0)

__attribute__((noinline)) void daxpy(long n, double a, const double *x, double *y) {
    for (long i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}
__attribute__((noinline)) void vfma256(long n, double a, const double *x, double *y) {
    __m256d va = _mm256_set1_pd(a);
    for (long i = 0; i < n; i += 4)
        _mm256_storeu_pd(y + i, _mm256_fmadd_pd(va, _mm256_loadu_pd(x + i), _mm256_loadu_pd(y + i)));
}
__attribute__((noinline)) void axpy128(long n, double a, const double *x, double *y) {
    __m128d va = _mm_set1_pd(a);
    for (long i = 0; i < n; i += 2)
        _mm_storeu_pd(y + i, _mm_add_pd(_mm_mul_pd(va, _mm_loadu_pd(x + i)), _mm_loadu_pd(y + i)));
}
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000; /* a multiple of 4 */
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (long i = 0; i < n; i++) { x[i] = (double)i; y[i] = 1.0; }
    ENTER(0); EXIT(0);
    daxpy(n, 2.0, x, y);
    ENTER(1); EXIT(1);
    vfma256(n, 2.0, x, y);
    ENTER(2); EXIT(2);
    axpy128(n, 2.0, x, y);
    ENTER(3); EXIT(3);
    printf("%.1f\n", y[n - 1]);
    free(x); free(y);
    return 0;
}
