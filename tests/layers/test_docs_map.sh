#!/usr/bin/env bash
# docs/ARCHITECTURE.md names every folder under src/ (as `src/NAME/`) and its layer
# table equals check_includes.py's: a new folder comes with its place on the map.
# test_docs_map_fixtures.sh shows the check can fail.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
bash "$ROOT/tests/layers/check_docs_map.sh" "$ROOT/src" "$ROOT/docs/ARCHITECTURE.md"
