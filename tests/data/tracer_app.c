/* Test program for pmac's PMPI tracer: every call counted by hand in tests/test_tracer.py.
 * usage: tracer_app [ITERS [BYTES [CRASH]]]   CRASH: 1 = abort() after the loop, 2 = raise SIGTERM */
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters = argc > 1 ? atoi(argv[1]) : 3;
    int nbytes = argc > 2 ? atoi(argv[2]) : 1024;
    int crash = argc > 3 ? atoi(argv[3]) : 0;
    char *sbuf = calloc((size_t)nbytes, 1), *rbuf = calloc((size_t)nbytes, 1);
    int right = (rank + 1) % size, left = (rank - 1 + size) % size;
    MPI_Request rq[2], prq[2];
    double x[4] = {1, 2, 3, 4}, y[4];
    MPI_Send_init(sbuf, nbytes, MPI_BYTE, right, 9, MPI_COMM_WORLD, &prq[0]);
    MPI_Recv_init(rbuf, nbytes, MPI_BYTE, left, 9, MPI_COMM_WORLD, &prq[1]);
    for (int it = 0; it < iters; it++) {
        MPI_Irecv(rbuf, nbytes, MPI_BYTE, left, 7, MPI_COMM_WORLD, &rq[0]);
        MPI_Isend(sbuf, nbytes, MPI_BYTE, right, 7, MPI_COMM_WORLD, &rq[1]);
        MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
        MPI_Sendrecv(sbuf, nbytes, MPI_BYTE, right, 8, rbuf, nbytes, MPI_BYTE, left, 8, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        MPI_Allreduce(x, y, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Startall(2, prq);
        MPI_Waitall(2, prq, MPI_STATUSES_IGNORE);
    }
    MPI_Request_free(&prq[0]);
    MPI_Request_free(&prq[1]);
    if (crash == 1) abort();
    if (crash == 2) raise(SIGTERM);
    int v[100] = {0};
    if (rank == 0)
        for (int p = 1; p < size; p++) MPI_Send(v, 100, MPI_INT, p, 5, MPI_COMM_WORLD);
    else
        MPI_Recv(v, 100, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &sub); /* key reverses the order */
    MPI_Bcast(v, 10, MPI_INT, 0, sub);
    int *counts = malloc(sizeof(int) * (size_t)size), *displs = malloc(sizeof(int) * (size_t)size);
    for (int p = 0; p < size; p++) counts[p] = p + 1, displs[p] = p * (p + 1) / 2;
    int *all = malloc(sizeof(int) * (size_t)(size * (size + 1) / 2));
    MPI_Gatherv(v, rank + 1, MPI_INT, all, counts, displs, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Comm_free(&sub);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
