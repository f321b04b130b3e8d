#!/usr/bin/env bash
# Loss spikes and non-finite steps through the command line:
#   - --spike-rewind without periodic checkpoints is refused (exit 2, one line);
#   - a poisoned batch (BAGUALU_TEST_SPIKE_SAMPLES: its loss reported x100) at steps 21-22
#     with patience 2 gives exactly one rewind, to step 20, samples [40, 44) skipped and
#     recorded in trainer.json; training goes on to the end;
#   - the same command twice gives byte-identical weights and optimizer files, and so does
#     a resume from the re-saved step 20 (it reads the skipped range back);
#   - NaN gradients from step 7 on (BAGUALU_TEST_NAN_STEPS) with --max-skips 3 stop the
#     run at step 9 with one line, exit 1, `latest` at step 5 and intact.
# Why it can fail: a detector that never fires or fires twice, a rewind that does not
# skip (the spike repeats), the range not saved or not read back (the resume differs),
# a skip limit not enforced, a save after the failing skips.
BIN=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$(dirname "$0")/../shell_checks.sh"
"$BIN" synth --vocab 64 --tokens 20000 --out "$D/data.bin" >/dev/null || { echo "synth failed"; exit 1; }
ARGS=(train --config "$SRC/configs/tiny_moe.json" --data "$D/data.bin" --batch-size 2 --seq-len 16
      --threads 1 --steps 30 --save-every 5)
SPIKE=(--spike-rewind 6 --spike-window 8 --spike-patience 2)

expect "no checkpoints" "spike-rewind needs checkpoints" -- "$BIN" train --config "$SRC/configs/tiny_moe.json" \
  --data "$D/data.bin" --spike-rewind 3
expect "bad window" "spike-window must be in" -- "$BIN" "${ARGS[@]}" --save-dir "$D/x" --spike-rewind 3 --spike-window 1
expect "bad max-skips" "max-skips must be positive" -- "$BIN" "${ARGS[@]}" --save-dir "$D/x" --max-skips 0

same_files() {  # same_files A B: the final step's weights and optimizer identical
  local f
  for f in model-00001-of-00001.safetensors optimizer-00001-of-00001.safetensors; do
    cmp -s "$1/step_00000030/$f" "$2/step_00000030/$f" || return 1
  done
}
for run in a b; do
  BAGUALU_TEST_SPIKE_SAMPLES=40-44 "$BIN" "${ARGS[@]}" "${SPIKE[@]}" --save-dir "$D/$run" \
    --log "$D/$run.jsonl" >"$D/$run.out" 2>"$D/$run.err" || bad "spike run $run failed: $(cat "$D/$run.err")"
done
n=$(grep -c '"rewind"' "$D/a.jsonl")
[ "$n" = 1 ] && ok || bad "$n rewinds logged, expected 1"
grep -q '"rewind":{"to_step":20,"skip_samples":\[40,44\]}' "$D/a.jsonl" && ok || bad "rewind not to step 20 skipping [40, 44): $(grep -o '"rewind":[^}]*}' "$D/a.jsonl")"
grep -q 'rewound to step 20, samples \[40, 44) skipped' "$D/a.out" && ok || bad "no rewind note on stdout"
tr -d ' \t\n' <"$D/a/step_00000030/trainer.json" | grep -q '"skipped_samples":\[\[40,44\]\]' && ok \
  || bad "trainer.json lacks skipped_samples [[40,44]]"
[ "$(grep '"step"' "$D/a.jsonl" | tail -n1 | grep -o '"step":[0-9]*')" = '"step":30' ] && ok || bad "the run did not reach step 30"
same_files "$D/a" "$D/b" && ok || bad "the same command twice gave different bits"
# A resume from the re-saved step 20 skips the range too (the hook is set: were the
# range not skipped, the spike would come back).
BAGUALU_TEST_SPIKE_SAMPLES=40-44 "$BIN" "${ARGS[@]}" "${SPIKE[@]}" --save-dir "$D/c" \
  --resume "$D/a/step_00000020" --log "$D/c.jsonl" >"$D/c.out" 2>"$D/c.err" || bad "resume failed: $(cat "$D/c.err")"
grep -q '"rewind"' "$D/c.jsonl" && bad "the resumed run rewound again" || ok
same_files "$D/a" "$D/c" && ok || bad "the resume from the re-saved step 20 differs from the uninterrupted run"

# --max-skips: three NaN steps in a row stop the run; the last checkpoint is intact.
BAGUALU_TEST_NAN_STEPS=7-100 expect_code "max-skips" 1 "3 steps in a row skipped (the last, step 9: nonfinite_grad" -- \
  "$BIN" "${ARGS[@]}" --save-dir "$D/m" --max-skips 3 --log "$D/m.jsonl"
[ "$(cat "$D/m/latest" 2>/dev/null)" = step_00000005 ] && ok || bad "latest is $(cat "$D/m/latest"), expected step_00000005"
ls -d "$D"/m/step_* | grep -qv step_00000005 && bad "a checkpoint after the skips: $(ls "$D/m")" || ok
"$BIN" inspect "$D/m/step_00000005" >/dev/null 2>"$D/i.err" && ok || bad "step 5 not intact: $(cat "$D/i.err")"
[ "$(grep -c '"skip_reason":"nonfinite_grad"' "$D/m.jsonl")" = 3 ] && ok || bad "not 3 skipped lines in the log"
echo "spike_rewind: $pass passed, $fail failed"
[ $fail -eq 0 ]
