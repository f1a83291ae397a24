#!/usr/bin/env bash
# Build the C example applications with the project's MPI compiler into examples/build/
# (not committed). Baseline instruction set x86-64-v3: valgrind (memory signatures) has no
# AVX-512 and kills -march=native binaries with SIGILL.
#   bash examples/build.sh [PYTHON]      PYTHON defaults to the one running pmac ($PMAC_PYTHON or python3)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${1:-${PMAC_PYTHON:-python3}}"
mpicc="${MPICC:-$("$py" -c 'from pmac.mpi import find_mpi; print(find_mpi().mpicc or "")')}"
if [ -z "$mpicc" ]; then
  echo "build.sh: no mpicc found (pip install mpich, or set MPICC)" >&2
  exit 1
fi
cflags="${CFLAGS:--O2 -g -march=x86-64-v3}"
mkdir -p "$here/build"
for app in stencil2d stream_mpi nbody; do
  # shellcheck disable=SC2086
  "$mpicc" $cflags -o "$here/build/$app.tmp" "$here/$app.c" -lm
  mv -f "$here/build/$app.tmp" "$here/build/$app"
done
echo "built: $(cd "$here/build" && echo stencil2d stream_mpi nbody) in $here/build"
