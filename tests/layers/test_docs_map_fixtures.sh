#!/usr/bin/env bash
# check_docs_map.sh on two fixtures. good/: a map naming every folder, its layer table
# equal to check_includes.py's (passes). bad/: a map naming io only without the slash and
# weird not at all, its table with moe at the wrong level, no row for io or plan, and a
# row for a folder the check does not place (fails with exactly bad/expected_docs.txt).
# Why it can fail: a check that passes everything, or misses a folder or a table row.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../shell_checks.sh"
F=$HERE/fixtures
if bash "$HERE/check_docs_map.sh" "$F/good/src" "$F/good/ARCHITECTURE.md" >"$D/out" 2>&1; then ok
else bad "good fixture: $(cat "$D/out")"; fi
bash "$HERE/check_docs_map.sh" "$F/bad/src" "$F/bad/ARCHITECTURE.md" >"$D/out" 2>&1
rc=$?
if [ $rc -eq 1 ] && diff "$F/bad/expected_docs.txt" "$D/out" >"$D/diff"; then ok
else bad "bad fixture: exit $rc (wanted 1), output differs from bad/expected_docs.txt:"; cat "$D/diff"; fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
