/* Test program for pmac's PMPI tracer: one-sided communication (RMA), run at 4 ranks.
 * The first window lives on the world in reverse order (local rank l = n-1-rank), so every target
 * rank must be translated to a world rank. Every call and byte is worked out by hand in
 * tests/test_tracer_calls.py. */
#include <mpi.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm rev;
    MPI_Comm_split(MPI_COMM_WORLD, 0, n - rank, &rev);
    int l = n - 1 - rank;
    double mem[100] = {0}, src[16] = {0}, dst[16];
    long lo = 1, lc = 0, lr;
    MPI_Win win;
    MPI_Win_create(mem, sizeof mem, sizeof(double), MPI_INFO_NULL, rev, &win);
    MPI_Win_fence(0, win);
    MPI_Put(src, 10, MPI_DOUBLE, (l + 1) % n, 0, 10, MPI_DOUBLE, win);    /* 80 B */
    MPI_Get(dst, 5, MPI_DOUBLE, (l + n - 1) % n, 20, 5, MPI_DOUBLE, win); /* 40 B */
    MPI_Win_fence(0, win);
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win); /* local 0 = world n-1 */
    MPI_Accumulate(src, 3, MPI_DOUBLE, 0, 30, 3, MPI_DOUBLE, MPI_SUM, win);             /* 24 B */
    MPI_Get_accumulate(src, 2, MPI_DOUBLE, dst, 2, MPI_DOUBLE, 0, 40, 2, MPI_DOUBLE, MPI_SUM, win); /* 16 + 16 */
    MPI_Fetch_and_op(src, dst, MPI_DOUBLE, 0, 50, MPI_SUM, win);                       /* 8 + 8 */
    MPI_Compare_and_swap(&lo, &lc, &lr, MPI_LONG, 0, 60, win);                          /* 16 + 8 */
    MPI_Win_flush(0, win);
    MPI_Win_unlock(0, win);
    MPI_Win_free(&win);

    double *base;
    MPI_Win w2;
    MPI_Win_allocate(64 * sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &w2);
    MPI_Win_lock_all(0, w2);
    MPI_Request rq[2];
    MPI_Rput(src, 6, MPI_DOUBLE, (rank + 1) % n, 0, 6, MPI_DOUBLE, w2, &rq[0]);      /* 48 B */
    MPI_Rget(dst, 7, MPI_DOUBLE, (rank + n - 1) % n, 8, 7, MPI_DOUBLE, w2, &rq[1]);  /* 56 B */
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
    MPI_Win_flush_all(w2);
    MPI_Win_unlock_all(w2);
    MPI_Win_free(&w2);
    MPI_Comm_free(&rev);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
