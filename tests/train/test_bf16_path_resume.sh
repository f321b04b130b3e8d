#!/usr/bin/env bash
# The kernels' bf16 path in checkpoints: trainer.json records it (training.bf16_path); a
# bf16 resume on a CPU taking the other path (forced here by BAGUALU_BF16_PATH) says so
# in one log line, the same path says nothing; a bad value of the variable is one error
# line naming it, exit 2, as amx forced where the CPU has no AMX tiles and native where
# oneDNN has no bf16 GEMM (a skip there: the resume across paths needs both). Why it can
# fail: the key not written or not read, the note missing or printed when nothing
# changed, the variable's value not checked.
BIN=$1
source "$(dirname "$0")/../shell_checks.sh"
cat >"$D/cfg.json" <<'JSON'
{"vocab_size": 32, "max_position_embeddings": 16, "hidden_size": 16, "num_hidden_layers": 1,
 "num_attention_heads": 2, "intermediate_size": 32, "num_local_experts": 2,
 "num_experts_per_tok": 1, "moe_intermediate_size": 16}
JSON
"$BIN" synth --vocab 32 --tokens 4000 --out "$D/data.bin" >/dev/null || { echo "synth failed"; exit 1; }
train() { "$BIN" train --config "$D/cfg.json" --data "$D/data.bin" --batch-size 2 --seq-len 8 --threads 1 --dtype bf16 "$@"; }

# native needs oneDNN's bf16 GEMMs, which 2.6 has where the CPU has AVX-512BW; elsewhere
# forcing it is one error line naming it, exit 2, and the resume across paths cannot run.
native=0
grep -qw avx512bw /proc/cpuinfo && native=1
if [ "$native" = 1 ]; then
    BAGUALU_BF16_PATH=native train --steps 2 --save-dir "$D/s" --save-every 2 >/dev/null 2>"$D/err" ||
        { echo "training failed:"; cat "$D/err"; exit 1; }
    CK=$D/s/step_00000002
    if grep -q '"bf16_path":[[:space:]]*"native"' "$CK/trainer.json"; then ok; else bad "trainer.json lacks bf16_path native"; fi
    BAGUALU_BF16_PATH=fp32 train --steps 3 --resume "$CK" >/dev/null 2>"$D/err"
    n=$(grep -c "taking the native bf16 path, resumed on one taking the fp32 path" "$D/err")
    if [ "$n" = 1 ]; then ok; else bad "resume on the other path: $n note lines: $(cat "$D/err")"; fi
    BAGUALU_BF16_PATH=native train --steps 3 --resume "$CK" >/dev/null 2>"$D/err"
    if grep -q "resumed on one taking" "$D/err"; then bad "a note although the path is the same"; else ok; fi
else
    BAGUALU_BF16_PATH=native expect native-unusable "BAGUALU_BF16_PATH=native needs a CPU on which oneDNN has bf16 GEMMs" -- train --steps 1
fi
BAGUALU_BF16_PATH=fast expect bad-variable "BAGUALU_BF16_PATH" -- train --steps 1
# amx forced: trains on AMX tiles where the CPU lists them (Linux >= 5.16 lists them only
# when it can hand them out), else one error line naming AMX, exit 2.
if grep -qw amx_tile /proc/cpuinfo; then
    if BAGUALU_BF16_PATH=amx train --steps 1 >/dev/null 2>"$D/err" && grep -q "bf16 path: amx" "$D/err"; then ok
    else bad "amx forced on a CPU with AMX tiles: $(cat "$D/err")"; fi
else
    BAGUALU_BF16_PATH=amx expect amx-unusable "BAGUALU_BF16_PATH=amx needs a CPU whose AMX tiles" -- train --steps 1
fi
echo "bf16 path resume: $pass passed, $fail failed"
[ "$fail" = 0 ] || exit 1
# What ran passed; the resume across paths did not run on this CPU: CTest shows a skip.
[ "$native" = 1 ] || { echo "no native bf16 path on this CPU: the resume across paths skipped"; exit 77; }
