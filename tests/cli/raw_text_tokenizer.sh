#!/usr/bin/env bash
# BERT on raw text with data.tokenizer: wordpiece: the first run tokenises into the user's cache folder
# (FERRY_CACHE_DIR here), never beside the text; the second reuses it (the shard is not written again), [MASK] is the vocabulary's, state.json records
# wordpiece, and the export carries vocab.txt and a tokenizer_config.json.
set -euo pipefail
ferry=$1 config=$2 vocab=$3 text=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
export FERRY_CACHE_DIR="$work/cache"
cp "$text" "$work/corpus.txt"
common=(--config "$config" --set data.path="$work/corpus.txt" --set data.tokenizer=wordpiece --set data.vocab="$vocab"
        --set model.vocab_size=1000 --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=32
        --set train.batch_size=4 --set train.eval_batches=1 --steps 1)
fail() { echo "$1"; shift; cat "$@"; exit 1; }
"$ferry" train "${common[@]}" --set train.checkpoint_dir="$work/ckpt" > "$work/first.log" 2>&1 || fail "first run failed" "$work/first.log"
grep -q "tokenising '$work/corpus.txt'" "$work/first.log" || fail "the first run did not tokenise" "$work/first.log"
shard=$(ls "$work"/cache/tokens/corpus.txt.*.wordpiece.*.bin)
[ -e "$work/.ferry-cache" ] && fail "the tokens were cached beside the text" /dev/null
before=$(stat -c %Y.%i "$shard")
"$ferry" train "${common[@]}" --set train.checkpoint_dir="$work/ckpt2" > "$work/second.log" 2>&1 || fail "second run failed" "$work/second.log"
grep -q "from the cache" "$work/second.log" || fail "the second run did not reuse the cache" "$work/second.log"
grep -q "tokenising '" "$work/second.log" && fail "the second run tokenised again" "$work/second.log"
[ "$(stat -c %Y.%i "$shard")" = "$before" ] || fail "the cached shard was written again" /dev/null
grep -q '"tokenizer": "wordpiece"' "$work"/ckpt/step-*/state.json || fail "state.json does not record wordpiece" "$work"/ckpt/step-*/state.json
"$ferry" export --checkpoint "$work/ckpt" --out "$work/hf" > "$work/export.log" 2>&1 || fail "export failed" "$work/export.log"
for f in model.safetensors config.json vocab.txt tokenizer_config.json; do
  [ -f "$work/hf/$f" ] || fail "the export lacks $f" "$work/export.log"
done
grep -q '"do_lower_case": true' "$work/hf/tokenizer_config.json" || fail "tokenizer_config.json" "$work/hf/tokenizer_config.json"
echo "raw text: tokenised once, reused, exported with its tokenizer"
