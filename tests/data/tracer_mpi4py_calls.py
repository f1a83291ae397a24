"""Test program for pmac's PMPI tracer: mpi4py's neighbourhood collectives, one-sided calls and
MPI-4 persistent collectives, which mpi4py on MPICH 5 makes through the large-count MPI_*_c entry
points. Counted by hand in tests/test_tracer_calls.py (run at 2 ranks)."""

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
cart = comm.Create_cart([n], periods=[True], reorder=False)  # neighbours [r-1, r+1] (mod n)
cart.Neighbor_alltoall(np.zeros(6), np.zeros(6))  # 3 doubles per slot
req = cart.Ineighbor_allgather(np.zeros(2), np.zeros(4))  # 2 doubles per slot
req.Wait()
win = MPI.Win.Allocate(80, 8, comm=comm)
win.Fence()
win.Put(np.ones(5), (r + 1) % n)  # 40 B
win.Get(np.empty(2), (r + n - 1) % n)  # 16 B
win.Fence()
win.Free()
p = comm.Allreduce_init(np.ones(3), np.zeros(3))  # 24 B, each Start an Iallreduce
for _ in range(2):
    p.Start()
    p.Wait()
p.Free()
q = comm.Ireduce_scatter_block(np.ones(2 * n), np.zeros(2))  # sends 2n doubles, gets 2
q.Wait()
# every rank sends 1 double to rank 0, 2 to rank 1, ...: receives r+1 from each
counts = [p + 1 for p in range(n)]
sdispl = [8 * sum(counts[:p]) for p in range(n)]
q = comm.Ialltoallw([np.zeros(sum(counts)), counts, sdispl, [MPI.DOUBLE] * n],
                    [np.zeros(n * (r + 1)), [r + 1] * n, [8 * (r + 1) * p for p in range(n)], [MPI.DOUBLE] * n])
q.Wait()
cart.Free()
