# Sourced by tests/comm/test_*.sh: finds the test programs in the build directory and
# wraps mpirun. Sets DIST_BIN_DIR; defines dist_have_mpi and DIST_MPIRUN.
BUILD=${2:?usage: bash test_xxx.sh <bagualu binary> <build dir>}
DIST_BIN_DIR=$BUILD/tests
if [ ! -x "$DIST_BIN_DIR/comm_test_layout" ]; then
  found=$(find "$BUILD" -name comm_test_layout -type f -perm -u+x 2>/dev/null | head -n 1)
  DIST_BIN_DIR=$(dirname "${found:-$DIST_BIN_DIR/x}")
fi

# Returns 0 when the build talks MPI and mpirun exists; 1 (after saying SKIP) for a
# build without MPI, which has nothing to launch: the caller then exits 77, which CTest
# reports as skipped (tests/CMakeLists.txt), never as passed. Exits failing when the
# test programs or mpirun are missing from an MPI build.
dist_have_mpi() {
  local backend
  if ! backend=$("$DIST_BIN_DIR/comm_test_layout" --backend 2>/dev/null); then
    echo "FAIL: no runnable comm_test_layout under $BUILD"
    echo "0 passed, 1 failed"
    exit 1
  fi
  if [ "$backend" != mpi ]; then
    echo "SKIP: build without MPI ($backend): nothing to launch (install libopenmpi-dev: scripts/setup.sh)"
    return 1
  fi
  if ! command -v mpirun >/dev/null; then
    echo "FAIL: MPI build but no mpirun on PATH (install openmpi-bin: scripts/setup.sh)"
    echo "0 passed, 1 failed"
    exit 1
  fi
}

# "${DIST_MPIRUN[@]}" -np N PROGRAM ARGS...: root is allowed (containers, CI) and
# more ranks than cores (2 cores here run 4 ranks); OpenMPI then yields the CPU while
# it waits. An array, so `timeout` can run it.
DIST_MPIRUN=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
             mpirun --oversubscribe)
