/* stencil2d: 2-D Jacobi relaxation with halo exchange (pmac example application).
 *
 *   stencil2d N ITERS
 *
 * An N x N grid of interior points (fixed boundary values) is split into blocks on a 2-D
 * process grid from MPI_Dims_create (non-periodic). Every iteration each rank
 *   - posts MPI_Irecv then MPI_Isend of one halo line to each existing neighbour (no calls
 *     towards the domain boundary), tag = direction of travel (0 north, 1 south, 2 west, 3 east),
 *   - MPI_Waitall on those requests (always called, possibly with 0 requests),
 *   - updates its block (5-point Jacobi) and
 *   - MPI_Allreduce(SUM) of one double: the squared change of the iteration.
 * Around the loop: MPI_Barrier before the timer starts, MPI_Reduce(MAX, 1 double, root 0) of
 * the loop time after. Rank 0 prints one line with the wall time and a checksum that does not
 * depend on the decomposition. Halo messages are MPI_DOUBLE: a north/south line has nx_local
 * doubles, a west/east line ny_local doubles. Communication-bound at small N.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int block_start(int n, int parts, int i) { return (int)((long)n * i / parts); }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3) {
        if (rank == 0) fprintf(stderr, "usage: stencil2d N ITERS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int n = atoi(argv[1]);
    const int iters = atoi(argv[2]);
    int dims[2] = {0, 0};
    MPI_Dims_create(size, 2, dims);          /* dims[0] rows (y) x dims[1] columns (x) */
    const int py = rank / dims[1], px = rank % dims[1];
    const int y0 = block_start(n, dims[0], py), y1 = block_start(n, dims[0], py + 1);
    const int x0 = block_start(n, dims[1], px), x1 = block_start(n, dims[1], px + 1);
    const int ny = y1 - y0, nx = x1 - x0, w = nx + 2;
    if (nx < 1 || ny < 1) {
        if (rank == 0) fprintf(stderr, "stencil2d: N=%d too small for %d ranks\n", n, size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int north = py > 0 ? rank - dims[1] : -1, south = py < dims[0] - 1 ? rank + dims[1] : -1;
    const int west = px > 0 ? rank - 1 : -1, east = px < dims[1] - 1 ? rank + 1 : -1;

    double *u = malloc(sizeof(double) * (size_t)w * (ny + 2));
    double *v = malloc(sizeof(double) * (size_t)w * (ny + 2));
    double *sbuf = malloc(sizeof(double) * 2 * (size_t)ny), *rbuf = malloc(sizeof(double) * 2 * (size_t)ny);
    /* boundary: 1 on the global north edge, 0 elsewhere; interior 0 */
    for (int j = 0; j < ny + 2; j++)
        for (int i = 0; i < w; i++)
            u[(size_t)j * w + i] = v[(size_t)j * w + i] = (j == 0 && py == 0) ? 1.0 : 0.0;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), diff = 0.0;
    for (int it = 0; it < iters; it++) {
        MPI_Request req[8];
        int nreq = 0;
        /* receives first: north halo row 0, south halo row ny+1, west col 0, east col nx+1 */
        if (north >= 0) MPI_Irecv(&u[1], nx, MPI_DOUBLE, north, 1, MPI_COMM_WORLD, &req[nreq++]);
        if (south >= 0) MPI_Irecv(&u[(size_t)(ny + 1) * w + 1], nx, MPI_DOUBLE, south, 0, MPI_COMM_WORLD, &req[nreq++]);
        if (west >= 0) MPI_Irecv(rbuf, ny, MPI_DOUBLE, west, 3, MPI_COMM_WORLD, &req[nreq++]);
        if (east >= 0) MPI_Irecv(rbuf + ny, ny, MPI_DOUBLE, east, 2, MPI_COMM_WORLD, &req[nreq++]);
        if (north >= 0) MPI_Isend(&u[(size_t)1 * w + 1], nx, MPI_DOUBLE, north, 0, MPI_COMM_WORLD, &req[nreq++]);
        if (south >= 0) MPI_Isend(&u[(size_t)ny * w + 1], nx, MPI_DOUBLE, south, 1, MPI_COMM_WORLD, &req[nreq++]);
        if (west >= 0) {
            for (int j = 0; j < ny; j++) sbuf[j] = u[(size_t)(j + 1) * w + 1];
            MPI_Isend(sbuf, ny, MPI_DOUBLE, west, 2, MPI_COMM_WORLD, &req[nreq++]);
        }
        if (east >= 0) {
            for (int j = 0; j < ny; j++) sbuf[ny + j] = u[(size_t)(j + 1) * w + nx];
            MPI_Isend(sbuf + ny, ny, MPI_DOUBLE, east, 3, MPI_COMM_WORLD, &req[nreq++]);
        }
        MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
        if (west >= 0) for (int j = 0; j < ny; j++) u[(size_t)(j + 1) * w] = rbuf[j];
        if (east >= 0) for (int j = 0; j < ny; j++) u[(size_t)(j + 1) * w + nx + 1] = rbuf[ny + j];

        double local = 0.0;
        for (int j = 1; j <= ny; j++) {
            const double *up = &u[(size_t)(j - 1) * w], *uc = &u[(size_t)j * w], *dn = &u[(size_t)(j + 1) * w];
            double *vc = &v[(size_t)j * w];
            for (int i = 1; i <= nx; i++) {
                double x = 0.25 * (up[i] + dn[i] + uc[i - 1] + uc[i + 1]);
                double d = x - uc[i];
                vc[i] = x;
                local += d * d;
            }
        }
        MPI_Allreduce(&local, &diff, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        double *t = u; u = v; v = t;
    }
    double t = MPI_Wtime() - t0, tmax = 0.0;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("stencil2d n_ranks=%d N=%d iters=%d dims=%dx%d wall_s=%.6f checksum=%.15e\n", size, n, iters,
               dims[0], dims[1], tmax, diff);
    free(u); free(v); free(sbuf); free(rbuf);
    MPI_Finalize();
    return 0;
}
