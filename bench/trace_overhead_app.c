/* Program for bench/trace_overhead: a timed loop of compute + MPI calls, one line of output.
 * usage: trace_overhead_app MODE ITERS WORK
 *   MODE app:   per iteration WORK steps of scalar compute, then a ring exchange (Irecv, Isend,
 *               Waitall) and an Allreduce of 1 double: 4 recorded calls per iteration.
 *   MODE tight: ITERS calls of MPI_Iprobe and nothing else (the per-call cost of the shim).
 * prints: loop_s=<max over ranks of the timed loop> cpu_s=<max over ranks of its CPU time>
 *         calls_per_rank=<MPI calls in the loop>
 * CPU time is the steadier measure on a shared machine (time descheduled does not count). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int tight = argc > 1 && strcmp(argv[1], "tight") == 0;
    long iters = argc > 2 ? atol(argv[2]) : 10000;
    long work = argc > 3 ? atol(argv[3]) : 10000;
    int right = (rank + 1) % size, left = (rank - 1 + size) % size;
    double sbuf[8] = {0}, rbuf[8], x = 1.0, y;
    volatile double acc = 0.0;
    long calls = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), c0 = cpu_now();
    if (tight) {
        int flag;
        for (long i = 0; i < iters; i++) MPI_Iprobe(MPI_ANY_SOURCE, 12345, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        calls = iters;
    } else {
        MPI_Request rq[2];
        for (long i = 0; i < iters; i++) {
            double a = acc;
            for (long k = 0; k < work; k++) a = a * 0.999999 + 1e-9 * (double)k;
            acc = a;
            MPI_Irecv(rbuf, 8, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, &rq[0]);
            MPI_Isend(sbuf, 8, MPI_DOUBLE, right, 1, MPI_COMM_WORLD, &rq[1]);
            MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
            MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        calls = 4 * iters;
    }
    double t[2] = {MPI_Wtime() - t0, cpu_now() - c0}, tmax[2];
    MPI_Reduce(t, tmax, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("loop_s=%.6f cpu_s=%.6f calls_per_rank=%ld acc=%g\n", tmax[0], tmax[1], calls, (double)acc);
    MPI_Finalize();
    return 0;
}
