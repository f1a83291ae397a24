"""Probes that characterise a machine: memory, compute (numba) and network (mpi4py). Each module also runs on its own."""
