#!/usr/bin/env bash
# The layering of src/: no include from a lower layer to a higher one or between two
# folders of one level, no folder outside the layer table, no include cycle between
# modules (check_includes.py; test_includes_fixtures.sh shows each rule can fail).
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
python3 "$ROOT/tests/layers/check_includes.py" "$ROOT/src"
