/* nbody: direct O(n^2) gravitational forces, positions shared by MPI_Allgather (pmac example).
 *
 *   nbody N STEPS          (N must be a multiple of the number of ranks)
 *
 * All ranks hold the positions of all N bodies (3 doubles each); rank r owns the N/size
 * bodies [r N/size, (r+1) N/size). A step computes the softened force on each owned body
 * from every body (N^2/size interactions per rank, with a sqrt and a division each: compute-
 * bound), updates velocities and positions of the owned bodies, then MPI_Allgather of the
 * owned positions (3 N/size MPI_DOUBLE from each rank). Around the loop: MPI_Barrier before
 * the timer, MPI_Reduce(MAX, 1 double, root 0) of the loop time after. Rank 0 prints the wall
 * time and a checksum (sum of |x|) that does not depend on the number of ranks.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3) {
        if (rank == 0) fprintf(stderr, "usage: nbody N STEPS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int n = atoi(argv[1]);
    const int steps = atoi(argv[2]);
    if (n < size || n % size != 0) {
        if (rank == 0) fprintf(stderr, "nbody: N=%d must be a positive multiple of %d ranks\n", n, size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int nloc = n / size, first = rank * nloc;
    double *pos = malloc(sizeof(double) * 3 * (size_t)n);
    double *vel = malloc(sizeof(double) * 3 * (size_t)nloc);
    double *mine = malloc(sizeof(double) * 3 * (size_t)nloc);
    /* deterministic initial state: bodies on a perturbed lattice, at rest */
    for (int i = 0; i < n; i++) {
        pos[3 * i + 0] = (double)(i % 17) + 0.01 * (double)(i % 5);
        pos[3 * i + 1] = (double)((i / 17) % 19) + 0.02 * (double)(i % 3);
        pos[3 * i + 2] = (double)(i / (17 * 19)) + 0.03 * (double)(i % 7);
    }
    for (int i = 0; i < 3 * nloc; i++) vel[i] = 0.0;
    const double dt = 1e-3, eps2 = 1e-2;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < nloc; i++) {
            const double xi = pos[3 * (first + i)], yi = pos[3 * (first + i) + 1], zi = pos[3 * (first + i) + 2];
            double fx = 0.0, fy = 0.0, fz = 0.0;
            for (int j = 0; j < n; j++) {
                const double dx = pos[3 * j] - xi, dy = pos[3 * j + 1] - yi, dz = pos[3 * j + 2] - zi;
                const double r2 = dx * dx + dy * dy + dz * dz + eps2;
                const double inv = 1.0 / (r2 * sqrt(r2));
                fx += dx * inv;
                fy += dy * inv;
                fz += dz * inv;
            }
            vel[3 * i] += dt * fx;
            vel[3 * i + 1] += dt * fy;
            vel[3 * i + 2] += dt * fz;
        }
        for (int i = 0; i < nloc; i++)
            for (int k = 0; k < 3; k++) mine[3 * i + k] = pos[3 * (first + i) + k] + dt * vel[3 * i + k];
        MPI_Allgather(mine, 3 * nloc, MPI_DOUBLE, pos, 3 * nloc, MPI_DOUBLE, MPI_COMM_WORLD);
    }
    double t = MPI_Wtime() - t0, tmax = 0.0;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double check = 0.0;
        for (int i = 0; i < 3 * n; i++) check += fabs(pos[i]);
        printf("nbody n_ranks=%d N=%d steps=%d wall_s=%.6f checksum=%.15e\n", size, n, steps, tmax, check);
    }
    free(pos); free(vel); free(mine);
    MPI_Finalize();
    return 0;
}
