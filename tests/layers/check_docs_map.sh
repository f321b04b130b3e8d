#!/usr/bin/env bash
# usage: check_docs_map.sh SRC_DIR DOC
# The map of the code (docs/ARCHITECTURE.md) cannot silently fall behind the code:
#   - every folder under SRC_DIR is named in DOC as `src/NAME/`;
#   - DOC's layer table (rows "| LEVEL | `src/NAME/` | ...") and LAYERS of
#     check_includes.py beside this script hold the same folders at the same levels.
# One line per difference; exit 1 when there is any, 0 when none, 2 on bad arguments.
if [ $# -ne 2 ] || [ ! -d "$1" ] || [ ! -f "$2" ]; then
  echo "usage: check_docs_map.sh SRC_DIR DOC" >&2; exit 2
fi
src=$1 doc=$2 doc_name=$(basename "$2") missing=0
here=$(cd "$(dirname "$0")" && pwd)
for dir in "$src"/*/; do
  [ -d "$dir" ] || continue
  name=$(basename "$dir")
  if ! grep -qF "src/$name/" "$doc"; then
    echo "unmapped folder: src/$name/ is not named in $doc_name"
    missing=1
  fi
done
# "level name" lines from the check's table and from the document's
table=$(PYTHONDONTWRITEBYTECODE=1 python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import check_includes as c
for name, level in sorted(c.LAYERS.items()): print(level, name)' "$here") || exit 2
rows=$(sed -nE 's/^\| *([0-9]+) *\| *`src\/([a-z_0-9]+)\/`.*/\1 \2/p' "$doc" | sort -k2)
while read -r level name; do
  doc_level=$(awk -v n="$name" '$2 == n { print $1 }' <<<"$rows")
  if [ -z "$doc_level" ]; then
    echo "table: src/$name/ (level $level in check_includes.py) has no row in $doc_name"; missing=1
  elif [ "$doc_level" != "$level" ]; then
    echo "table: src/$name/ is level $doc_level in $doc_name but $level in check_includes.py"; missing=1
  fi
done <<<"$table"
while read -r level name; do
  [ -n "$name" ] || continue
  if ! awk -v n="$name" '$2 == n { f = 1 } END { exit !f }' <<<"$table"; then
    echo "table: $doc_name's row src/$name/ is not in check_includes.py's LAYERS"; missing=1
  fi
done <<<"$rows"
exit $missing
