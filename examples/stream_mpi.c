/* stream_mpi: STREAM-triad sweeps with one allreduce per sweep (pmac example application).
 *
 *   stream_mpi N SWEEPS
 *
 * Each rank owns three arrays of N doubles (a, b, c: 24 N bytes). A sweep is the triad
 * a[i] = b[i] + s * c[i] over the whole array followed by MPI_Allreduce(SUM) of one double
 * (a[k] of an index that moves every sweep, so no sweep can be skipped). Around the loop:
 * MPI_Barrier before the timer, MPI_Reduce(MAX, 1 double, root 0) of the loop time after.
 * Memory-bound when 24 N bytes exceed the caches. Rank 0 prints the wall time, the triad
 * bandwidth per rank and a checksum.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3) {
        if (rank == 0) fprintf(stderr, "usage: stream_mpi N SWEEPS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const long n = atol(argv[1]);
    const int sweeps = atoi(argv[2]);
    if (n < 1) MPI_Abort(MPI_COMM_WORLD, 2);
    double *a = aligned_alloc(64, sizeof(double) * (size_t)((n + 7) / 8 * 8));
    double *b = aligned_alloc(64, sizeof(double) * (size_t)((n + 7) / 8 * 8));
    double *c = aligned_alloc(64, sizeof(double) * (size_t)((n + 7) / 8 * 8));
    for (long i = 0; i < n; i++) {
        a[i] = 0.0;
        b[i] = 1.0 + (double)(i % 7);
        c[i] = 0.5 * (double)((i + rank) % 3);
    }
    const double s = 3.0;
    double total = 0.0, check = 0.0;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int k = 0; k < sweeps; k++) {
        for (long i = 0; i < n; i++)
            a[i] = b[i] + s * c[i];
        double mine = a[(k * 7919L) % n];
        MPI_Allreduce(&mine, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        check += total;
        /* make the next sweep depend on this one's result */
        b[(k * 104729L) % n] += 1e-3 * total;
    }
    double t = MPI_Wtime() - t0, tmax = 0.0;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("stream_mpi n_ranks=%d N=%ld sweeps=%d wall_s=%.6f triad_bytes_per_s_per_rank=%.4e checksum=%.15e\n",
               size, n, sweeps, tmax, sweeps > 0 ? 24.0 * n * sweeps / tmax : 0.0, check);
    free(a); free(b); free(c);
    MPI_Finalize();
    return 0;
}
