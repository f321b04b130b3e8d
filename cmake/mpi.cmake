# MPI: the distributed engine (src/comm/). Without it the build uses dist/'s
# single-process communicator, so `bagualu` still runs on one machine.
find_package(MPI COMPONENTS C QUIET)
option(BG_MPI "communicate over MPI (else a single-process communicator)" ${MPI_C_FOUND})
if(BG_MPI)
  if(NOT MPI_C_FOUND)
    message(FATAL_ERROR "BG_MPI=ON but CMake found no MPI for C: install libopenmpi-dev "
                        "(scripts/setup.sh) or configure with -DBG_MPI=OFF")
  endif()
  list(APPEND BG_LINK_DEPS MPI::MPI_C)
  target_compile_definitions(bagualu_objects PUBLIC BG_HAVE_MPI)
  message(STATUS "bagualu: MPI ${MPI_C_VERSION} (${MPIEXEC_EXECUTABLE})")
else()
  message(STATUS "bagualu: no MPI, single-process communicator")
endif()
