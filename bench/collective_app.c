/* 2-rank collectives timed back to back in C, as probes/network.py times them from mpi4py:
 * per (op, bytes) the loop time per call (the slower rank's), median of REPS repetitions; a
 * bcast's root alternates between the two ranks call by call (since 27 Nov 2026).
 * Usage: collective_app ITERS REPS [single|multiple] (the MPI thread level to initialise MPI at,
 * default single); prints "op bytes seconds" lines on rank 0.
 * Used by bench/collective_check. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int provided, multiple = argc > 3 && strcmp(argv[3], "multiple") == 0;
    MPI_Init_thread(&argc, &argv, multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
    int iters = argc > 1 ? atoi(argv[1]) : 20000, reps = argc > 2 ? atoi(argv[2]) : 7, rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *ops[] = {"barrier", "bcast", "allreduce"};
    const int sizes[] = {8, 64, 512, 4096};
    double *a = calloc(4096, 1), *b = calloc(4096, 1), t[64];
    for (int o = 0; o < 3; o++) {
        for (int s = 0; s < (o == 0 ? 1 : 4); s++) {
            int n = sizes[s] / 8;
            for (int r = 0; r < reps && r < 64; r++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                for (int i = 0; i < iters; i++) {
                    if (o == 0) MPI_Barrier(MPI_COMM_WORLD);
                    else if (o == 1) MPI_Bcast(a, n, MPI_DOUBLE, i % 2, MPI_COMM_WORLD); /* root moves, as
                        probes/network.py's (a fixed root runs ahead of the other rank) */
                    else MPI_Allreduce(a, b, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
                }
                double dt = (MPI_Wtime() - t0) / iters, worst;
                MPI_Reduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
                t[r] = worst;
            }
            qsort(t, reps, sizeof(double), cmp);
            if (rank == 0) printf("%s %d %.6e\n", ops[o], o == 0 ? 0 : sizes[s], t[reps / 2]);
        }
    }
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
