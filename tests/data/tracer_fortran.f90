! Test program for pmac's PMPI tracer through the Fortran binding (Open MPI + gfortran, `use mpi`).
program tracer_fortran
  use mpi
  implicit none
  integer :: ierr, rank, nprocs, right, left, sub, i
  integer :: reqs(2), st(MPI_STATUS_SIZE), idx, outc, idxs(2)
  double precision :: a(100), b(100), x, y
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  right = mod(rank + 1, nprocs)
  left = mod(rank - 1 + nprocs, nprocs)
  a = 1.0d0
  do i = 1, 2
    call MPI_Irecv(b, 100, MPI_DOUBLE_PRECISION, left, 7, MPI_COMM_WORLD, reqs(1), ierr)
    call MPI_Isend(a, 100, MPI_DOUBLE_PRECISION, right, 7, MPI_COMM_WORLD, reqs(2), ierr)
    call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE, ierr)
  end do
  ! any order, 1-based indices in Fortran: Waitany then Waitsome on what is left
  call MPI_Irecv(b, 100, MPI_DOUBLE_PRECISION, left, 11, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 100, MPI_DOUBLE_PRECISION, right, 11, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitany(2, reqs, idx, st, ierr)
  call MPI_Waitsome(2, reqs, outc, idxs, MPI_STATUSES_IGNORE, ierr)
  call MPI_Sendrecv(a, 10, MPI_DOUBLE_PRECISION, right, 8, b, 10, MPI_DOUBLE_PRECISION, left, 8, &
                    MPI_COMM_WORLD, st, ierr)
  if (rank == 0) then
    call MPI_Send(a, 5, MPI_DOUBLE_PRECISION, nprocs - 1, 9, MPI_COMM_WORLD, ierr)
  end if
  if (rank == nprocs - 1) then
    call MPI_Recv(b, 100, MPI_DOUBLE_PRECISION, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  end if
  x = rank
  call MPI_Allreduce(x, y, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, 2, MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, ierr)
  call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), nprocs - rank, sub, ierr)
  call MPI_Bcast(a, 3, MPI_DOUBLE_PRECISION, 0, sub, ierr)
  call MPI_Comm_free(sub, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call MPI_Finalize(ierr)
end program tracer_fortran
