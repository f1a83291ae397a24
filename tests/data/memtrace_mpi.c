/* MPI program for tests/test_memtrace.py: 3 rounds of a scalar daxpy (n elements) + Allreduce. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) void daxpy(long n, double a, const double *x, double *y) {
    for (long i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    long n = argc > 1 ? atol(argv[1]) : 10000;
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), s = 0, t = 0;
    for (long i = 0; i < n; i++) { x[i] = 1.0; y[i] = 0.0; }
    for (int r = 0; r < 3; r++) {
        daxpy(n, 0.5, x, y);
        s = y[n - 1];
        MPI_Allreduce(&s, &t, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    free(x); free(y);
    MPI_Finalize();
    return t > 0 ? 0 : 1;
}
