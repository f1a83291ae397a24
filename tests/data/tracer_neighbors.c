/* Test program for pmac's PMPI tracer: neighbourhood collectives on the three process topologies.
 * Every call, peer and byte is worked out by hand in tests/test_tracer_calls.py (run at 4 ranks).
 * usage: tracer_neighbors [p2p]   p2p: the same exchanges written as Irecv/Isend/Waitall by hand */
#include <mpi.h>
#include <string.h>

static double sd[64], rd[64];
static int si[64], ri[64];

/* one neighbourhood exchange as point-to-point: receives first, then sends, one Waitall */
static void by_hand(int nin, const int *src, const int *rbytes, int nout, const int *dst, const int *sbytes,
                    MPI_Comm comm) {
    MPI_Request rq[16];
    int k = 0;
    for (int i = 0; i < nin; i++)
        if (src[i] != MPI_PROC_NULL) MPI_Irecv(rd, rbytes[i], MPI_BYTE, src[i], 99, comm, &rq[k++]);
    for (int i = 0; i < nout; i++)
        if (dst[i] != MPI_PROC_NULL) MPI_Isend(sd, sbytes[i], MPI_BYTE, dst[i], 99, comm, &rq[k++]);
    MPI_Waitall(k, rq, MPI_STATUSES_IGNORE);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int p2p = argc > 1 && strcmp(argv[1], "p2p") == 0;

    /* 1. the world in reverse order (local rank l = n-1-rank), a 1-D non-periodic grid on it:
     *    neighbours [l-1, l+1] = world [rank+1, rank-1], MPI_PROC_NULL at the two ends */
    MPI_Comm rev, cart;
    MPI_Comm_split(MPI_COMM_WORLD, 0, n - rank, &rev);
    int dims[1] = {n}, periods[1] = {0};
    MPI_Cart_create(rev, 1, dims, periods, 0, &cart);
    int l, nb[2];
    MPI_Comm_rank(cart, &l);
    MPI_Cart_shift(cart, 0, 1, &nb[0], &nb[1]);
    int c24[2] = {24, 24}, cv[2] = {4 * (l + 1), 4 * (l + 2)}, c8[2] = {8, 8};
    if (p2p) {
        by_hand(2, nb, c24, 2, nb, c24, cart);
        by_hand(2, nb, c8, 2, nb, c8, cart);
        by_hand(2, nb, cv, 2, nb, cv, cart);
    } else {
        MPI_Neighbor_alltoall(sd, 3, MPI_DOUBLE, rd, 3, MPI_DOUBLE, cart); /* 24 B per slot */
        MPI_Neighbor_allgather(si, 2, MPI_INT, ri, 2, MPI_INT, cart);      /* 8 B per slot */
        /* slot 0 (to l-1) l+1 ints, slot 1 (to l+1) l+2 ints: what l-1 sends right is (l-1)+2 = l+1 */
        int cnt[2] = {l + 1, l + 2}, dsp[2] = {0, 16};
        MPI_Neighbor_alltoallv(si, cnt, dsp, MPI_INT, ri, cnt, dsp, MPI_INT, cart);
    }
    MPI_Request rq;
    MPI_Ineighbor_alltoall(sd, 1, MPI_DOUBLE, rd, 1, MPI_DOUBLE, cart, &rq);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);

    /* 2. distributed graph on the world: out to rank+1, rank+2, in from rank-1, rank-2 (mod n) */
    MPI_Comm dg;
    int srcs[2] = {(rank - 1 + n) % n, (rank - 2 + n) % n}, dsts[2] = {(rank + 1) % n, (rank + 2) % n};
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, srcs, MPI_UNWEIGHTED, 2, dsts, MPI_UNWEIGHTED, MPI_INFO_NULL, 0,
                                   &dg);
    int rc[2] = {srcs[0] + 1, srcs[1] + 1}, disp[2] = {0, 16};
    int sw[2] = {1, 2}, dw[2] = {0, 16};
    MPI_Aint adw[2] = {0, 16};
    MPI_Datatype tw[2] = {MPI_INT, MPI_DOUBLE};
    if (p2p) {
        int sb[2] = {4 * (rank + 1), 4 * (rank + 1)}, rb[2] = {4 * rc[0], 4 * rc[1]};
        by_hand(2, srcs, rb, 2, dsts, sb, dg);
        int wb[2] = {4, 16};
        by_hand(2, srcs, wb, 2, dsts, wb, dg);
    } else {
        MPI_Neighbor_allgatherv(si, rank + 1, MPI_INT, ri, rc, disp, MPI_INT, dg);
        /* slot 0: 1 int to rank+1 (which gets it from its in-slot 0), slot 1: 2 doubles to rank+2 */
        MPI_Neighbor_alltoallw(sd, sw, adw, tw, rd, sw, adw, tw, dg);
    }
    (void)dw;

    /* 3. graph topology: a ring, node i's edges [i+1, i-1] */
    int index[64], edges[128];
    for (int i = 0; i < n; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i + 1) % n;
        edges[2 * i + 1] = (i - 1 + n) % n;
    }
    MPI_Comm ring;
    MPI_Graph_create(MPI_COMM_WORLD, n, index, edges, 0, &ring);
    MPI_Ineighbor_allgather(si, 1, MPI_INT, ri, 1, MPI_INT, ring, &rq);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);

    MPI_Comm_free(&ring);
    MPI_Comm_free(&dg);
    MPI_Comm_free(&cart);
    MPI_Comm_free(&rev);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
