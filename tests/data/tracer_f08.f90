! Test program for pmac's PMPI tracer through Open MPI's Fortran 2008 binding (`use mpi_f08`),
! whose MPI_Send_f08 & co. call the mpif.h implementation (ompi_send_f) by its internal name.
! Every call is counted by hand in tests/test_tracer_calls.py.
program tracer_f08
  use mpi_f08
  implicit none
  integer :: rank, nprocs, right, left
  type(MPI_Request) :: reqs(2)
  type(MPI_Status) :: st
  type(MPI_Comm) :: sub
  double precision :: a(100), b(100), x(4), y(4)
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
  right = mod(rank + 1, nprocs)
  left = mod(rank - 1 + nprocs, nprocs)
  a = 1.0d0
  x = 1.0d0
  call MPI_Irecv(b, 100, MPI_DOUBLE_PRECISION, left, 7, MPI_COMM_WORLD, reqs(1))
  call MPI_Isend(a, 100, MPI_DOUBLE_PRECISION, right, 7, MPI_COMM_WORLD, reqs(2))
  call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE)
  if (rank == 0) then
    call MPI_Send(a, 5, MPI_DOUBLE_PRECISION, nprocs - 1, 9, MPI_COMM_WORLD)
  end if
  if (rank == nprocs - 1) then
    call MPI_Recv(b, 5, MPI_DOUBLE_PRECISION, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, st)
  end if
  call MPI_Allreduce(x, y, 4, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
  call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), nprocs - rank, sub)
  call MPI_Bcast(x, 2, MPI_DOUBLE_PRECISION, 0, sub)
  call MPI_Comm_free(sub)
  call MPI_Barrier(MPI_COMM_WORLD)
  call MPI_Finalize()
end program
