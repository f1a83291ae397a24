/* Test program for pmac's PMPI tracer: MPI-4 persistent collectives (MPI_*_init + MPI_Start(all)),
 * run at 1, 2 and 4 ranks. Every call and byte is worked out by hand in tests/test_tracer_calls.py.
 * usage: tracer_persistent_coll [nb]   nb: the same collectives written as Iallreduce/Ibcast/... by hand */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int nb = argc > 1 && strcmp(argv[1], "nb") == 0;
    double x[4] = {1, 2, 3, 4}, y[4];
    int v[10] = {0}, mine[64] = {0}, all[64 * 65 / 2 + 1];
    int *counts = malloc(sizeof(int) * (size_t)n), *displs = malloc(sizeof(int) * (size_t)n);
    for (int p = 0; p < n; p++) counts[p] = p + 1, displs[p] = p * (p + 1) / 2;
    int root = n - 1;
    MPI_Request rq[3];
    if (!nb) {
        MPI_Allreduce_init(x, y, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &rq[0]);
        MPI_Bcast_init(v, 10, MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &rq[1]);
        MPI_Allgatherv_init(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &rq[2]);
    }
    for (int it = 0; it < 3; it++) {
        if (nb) {
            MPI_Iallreduce(x, y, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &rq[0]);
            MPI_Ibcast(v, 10, MPI_INT, root, MPI_COMM_WORLD, &rq[1]);
            MPI_Iallgatherv(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD, &rq[2]);
        } else {
            MPI_Startall(3, rq);
        }
        MPI_Waitall(3, rq, MPI_STATUSES_IGNORE);
    }
    if (nb) {
        MPI_Iallreduce(x, y, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &rq[0]);
    } else {
        MPI_Start(&rq[0]);
    }
    MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
    if (!nb)
        for (int i = 0; i < 3; i++) MPI_Request_free(&rq[i]);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
