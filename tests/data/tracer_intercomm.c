/* Test program for pmac's PMPI tracer: intercommunicators (create, dup, merge), run at 4 ranks.
 * Evens and odds form two groups; on an intercommunicator a peer is a rank of the other group.
 * Every call and peer is worked out by hand in tests/test_tracer_calls.py. */
#include <mpi.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int colour = rank % 2, v[100] = {0};
    MPI_Comm half, inter, dup, merged;
    MPI_Comm_split(MPI_COMM_WORLD, colour, rank, &half); /* evens [0, 2], odds [1, 3] */
    int l;
    MPI_Comm_rank(half, &l);
    /* leaders: local rank 0 of each half; world ranks 0 and 1 in the peer communicator */
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, colour == 0 ? 1 : 0, 7, &inter);
    if (colour == 0) { /* remote rank l is world rank 2l+1 */
        MPI_Send(v, 100, MPI_INT, l, 3, inter);
        MPI_Recv(v, 50, MPI_INT, l, 4, inter, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(v, 100, MPI_INT, l, 3, inter, MPI_STATUS_IGNORE);
        MPI_Send(v, 50, MPI_INT, l, 4, inter);
    }
    MPI_Comm_dup(inter, &dup);
    int other = (l + 1) % 2; /* the other member of the remote group */
    MPI_Request rq[2];
    MPI_Irecv(v, 8, MPI_INT, other, 5, dup, &rq[0]);
    MPI_Isend(v + 50, 8, MPI_INT, other, 5, dup, &rq[1]);
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
    MPI_Intercomm_merge(inter, colour, &merged); /* evens low: [0, 2, 1, 3] */
    MPI_Bcast(v, 10, MPI_INT, 2, merged);        /* local root 2 = world rank 1 */
    MPI_Comm_free(&merged);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
