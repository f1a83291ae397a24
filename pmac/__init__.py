"""pmac: predict the run time of MPI applications on machines you do not have."""

__version__ = "0.1.0"
