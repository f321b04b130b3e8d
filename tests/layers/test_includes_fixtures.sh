#!/usr/bin/env bash
# check_includes.py on fixture trees. fixtures/bad/src holds one of each violation: an
# unknown folder (weird/), a sideways include (io -> data), an upward one (model ->
# train), and cycles (moe exchange <-> moe_layer, train trainer <-> checkpoint, a loop
# of three in core); the check must exit 1 with exactly the lines of bad/expected_includes.txt.
# fixtures/good/src (legal includes, a header found beside its includer, a library
# header in quotes) must pass. --alias weird=core must drop only the unknown folder.
# Why it can fail: a check that passes everything, misses a rule, or blames legal code.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../shell_checks.sh"
F=$HERE/fixtures
CHECK="python3 $HERE/check_includes.py"
if $CHECK "$F/good/src" >"$D/out" 2>&1; then ok; else bad "good fixture: $(cat "$D/out")"; fi
$CHECK "$F/bad/src" >"$D/out" 2>&1
rc=$?
if [ $rc -eq 1 ] && diff "$F/bad/expected_includes.txt" "$D/out" >"$D/diff"; then ok
else bad "bad fixture: exit $rc (wanted 1), output differs from bad/expected_includes.txt:"; cat "$D/diff"; fi
$CHECK "$F/bad/src" --alias weird=core >"$D/out" 2>&1
grep -v '^unknown folder: src/weird/' "$F/bad/expected_includes.txt" >"$D/want"
if diff "$D/want" "$D/out" >"$D/diff"; then ok
else bad "--alias weird=core: output differs:"; cat "$D/diff"; fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
