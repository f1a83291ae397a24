"""Test program for pmac's PMPI tracer through mpi4py (large-count _c entry points, matched probes)."""
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size
a = np.arange(100, dtype=np.float64)
b = np.empty_like(a)
# pickled point-to-point: send -> MPI_Send_c, recv -> MPI_Mprobe + MPI_Mrecv_c
comm.send({"rank": rank}, dest=right, tag=1)
obj = comm.recv(source=left, tag=1)
assert obj["rank"] == left
# buffer point-to-point
r = comm.Irecv(b, source=left, tag=2)
s = comm.Isend(a, dest=right, tag=2)
MPI.Request.Waitall([r, s])
comm.Sendrecv(a, dest=right, sendtag=3, recvbuf=b, source=left, recvtag=3)
# completion in any order: Waitany then Waitsome on what is left
reqs = [comm.Irecv(b, source=left, tag=5), comm.Isend(a, dest=right, tag=5)]
MPI.Request.Waitany(reqs)
MPI.Request.Waitsome(reqs)
# vector collectives: rank r contributes r + 1 doubles
mine = np.full(rank + 1, float(rank))
counts = [p + 1 for p in range(size)]
allv = np.empty(sum(counts))
comm.Allgatherv(mine, [allv, counts])
red = np.empty(rank + 1)
comm.Reduce_scatter(np.ones(sum(counts)), red, recvcounts=counts)
# persistent
ps = comm.Send_init(a, dest=right, tag=4)
pr = comm.Recv_init(b, source=left, tag=4)
for _ in range(2):
    MPI.Prequest.Startall([ps, pr])
    MPI.Request.Waitall([ps, pr])
ps.Free()
pr.Free()
# collectives and a split communicator (key reverses the order)
comm.Allreduce(a, b, op=MPI.SUM)
sub = comm.Split(rank % 2, size - rank)
sub.Bcast(a, root=0)
sub.Free()
time.sleep(0.05)  # a known compute burst before the barrier
comm.Barrier()
