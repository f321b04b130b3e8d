# Sourced by the shell tests: a temporary directory $D removed at exit, pass/fail
# counters with ok and bad, and the bad-input check every command-line test makes.
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "FAIL: $*"; }
# check WHAT command...: the command succeeds.
check() { local what=$1; shift; if "$@"; then ok; else bad "$what"; fi; }

# expect_code NAME CODE PATTERN -- command...: the command exits with CODE and writes
# exactly one line to stderr, matching PATTERN (grep).
expect_code() {
  local name=$1 code=$2 pattern=$3; shift 4
  "$@" >"$D/out" 2>"$D/err"
  local rc=$? lines
  lines=$(wc -l <"$D/err")
  if [ $rc -eq "$code" ] && [ "$lines" -eq 1 ] && grep -q -- "$pattern" "$D/err"; then ok
  else bad "$name: exit $rc, $lines stderr line(s): $(cat "$D/err") (wanted exit $code and one line matching: $pattern)"; fi
}

# expect NAME PATTERN -- command...: bad input, exit code 2.
expect() { local name=$1 pattern=$2; shift 3; expect_code "$name" 2 "$pattern" -- "$@"; }
