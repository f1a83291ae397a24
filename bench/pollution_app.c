/* bench/pollution_check's program: 2 ranks alternate two kinds of iterations, each ending in an
 * 8-byte MPI_Sendrecv with the other rank:
 *   read:  sum a W-byte array of doubles (every element, unit stride: reads only), then pad to P us;
 *   pause: spin P us (no memory traffic).
 * P (the pause) is the same for both, so the two kinds of Sendrecv differ only in what the burst
 * before them did to the caches. Prints per kind the median Sendrecv time (us) of rank 0 and 1.
 *   mpiexec -n 2 pollution_app W_BYTES ITERS PAUSE_US
 * pmac's probe sweeps with one write per line instead; this reads every double: a different
 * pattern for the same question. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof(double), cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 4 || size != 2) {
        if (rank == 0) fprintf(stderr, "usage: mpiexec -n 2 pollution_app W_BYTES ITERS PAUSE_US\n");
        MPI_Finalize();
        return 2;
    }
    long n = atol(argv[1]) / 8;
    int iters = atoi(argv[2]);
    double pause = atof(argv[3]) * 1e-6;
    double *a = malloc((n > 0 ? n : 1) * sizeof(double));
    for (long i = 0; i < n; i++) a[i] = (double)i;
    double *t_read = malloc(iters * sizeof(double)), *t_pause = malloc(iters * sizeof(double));
    double s = 0.0, x = 1.0, y = 0.0;
    int peer = 1 - rank;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int it = 0; it < iters; it++) {
        for (int kind = 0; kind < 2; kind++) {
            double t0 = MPI_Wtime();
            if (kind == 0)
                for (long i = 0; i < n; i++) s += a[i];
            while (MPI_Wtime() - t0 < pause) {
            }
            double t1 = MPI_Wtime();
            MPI_Sendrecv(&x, 1, MPI_DOUBLE, peer, 0, &y, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            (kind == 0 ? t_read : t_pause)[it] = MPI_Wtime() - t1;
        }
    }
    double mine[2] = {median(t_read, iters) * 1e6, median(t_pause, iters) * 1e6}, all[4];
    MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("read_us=%.4f,%.4f pause_us=%.4f,%.4f sum=%g\n", all[0], all[2], all[1], all[3], s + y);
    free(a);
    free(t_read);
    free(t_pause);
    MPI_Finalize();
    return 0;
}
