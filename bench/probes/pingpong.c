/* C reference ping-pong for bench/probes/pingpong.py: the same protocol as probes/network.py
 * (blocking MPI_Send/MPI_Recv, batch of `iters` round trips per repetition, one-way time =
 * batch / (2 iters), best of the repetitions), against the same MPI library.
 *
 * Build: mpicc -O3 -march=native -DPINGPONG_LIB -shared -fPIC -o libpingpong.so pingpong.c
 *        (pingpong.py does this), or without -DPINGPONG_LIB -shared for a standalone program:
 * Run:   mpiexec -n 2 ./pingpong [hugepage 0|1] [reps] SIZE:ITERS ...
 * Prints "SIZE ONE_WAY_SECONDS" per size on rank 0.
 * Buffers: 2 MiB-aligned; with hugepage=1 madvise(MADV_HUGEPAGE), as numpy does for large
 * arrays when transparent huge pages are in 'madvise' mode, so both sides compare like with like.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* One batch of `iters` round trips of `n` bytes; returns seconds. Also built as a shared
 * library (-DPINGPONG_LIB -shared -fPIC) that pingpong.py calls through ctypes inside the same
 * MPI processes as the probe's loops, so C and probe alternate repetition by repetition. */
double pp_c(char *buf, int n, int iters, int first, int peer) {
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (first) { MPI_Send(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                     MPI_Recv(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
        else { MPI_Recv(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
               MPI_Send(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD); }
    }
    return MPI_Wtime() - t0;
}

#ifndef PINGPONG_LIB
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2 || argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: mpiexec -n 2 pingpong HUGEPAGE REPS SIZE:ITERS ...\n");
        MPI_Finalize();
        return 2;
    }
    int huge = atoi(argv[1]), reps = atoi(argv[2]);
    size_t maxb = 1;
    for (int a = 3; a < argc; a++) {
        size_t s = strtoull(argv[a], NULL, 10);
        if (s > maxb) maxb = s;
    }
    size_t alloc = (maxb + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    char *buf = NULL;
    if (posix_memalign((void **)&buf, 2u << 20, alloc)) MPI_Abort(MPI_COMM_WORLD, 1);
    if (huge) madvise(buf, alloc, MADV_HUGEPAGE);
    memset(buf, 1, alloc);
    double *t = malloc(sizeof(double) * reps);
    int peer = 1 - rank;
    for (int a = 3; a < argc; a++) {
        char *colon = strchr(argv[a], ':');
        int n = atoi(argv[a]);
        int iters = colon ? atoi(colon + 1) : 1000;
        if (rank > 1) continue;
        for (int w = 0; w < iters / 10 + 1; w++) {  /* warm-up */
            if (rank == 0) { MPI_Send(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                             MPI_Recv(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
            else { MPI_Recv(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                   MPI_Send(buf, n, MPI_BYTE, peer, 1, MPI_COMM_WORLD); }
        }
        for (int r = 0; r < reps; r++)
            t[r] = pp_c(buf, n, iters, rank == 0, peer) / (2.0 * iters);
        qsort(t, reps, sizeof(double), cmp);
        if (rank == 0) printf("%d %.6e\n", n, t[0]);  /* best repetition (shared machines) */
    }
    free(t);
    free(buf);
    MPI_Finalize();
    return 0;
}
#endif
