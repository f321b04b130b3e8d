#!/usr/bin/env bash
# test_no_alloc with 3 threads, in a process of its own (the thread count is set before
# oneDNN first runs): the fixture's 4 experts are then fewer than two per thread, so they
# run one after the other with every GEMM threaded, and that path too must allocate
# nothing in the steady state. (A parallel construct with an if clause that was false
# cost libgomp an allocation per call; this caught it.)
set -euo pipefail
OMP_NUM_THREADS=3 "$2/tests/train_test_no_alloc"
