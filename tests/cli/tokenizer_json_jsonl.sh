#!/usr/bin/env bash
# Fine-tuning data end to end: a JSONL file (one document a line, its "text") with a Hugging Face
# tokenizer.json (Llama 3's kind): `ferry tokenize` writes a shard of [BOS] tokens EOS per document and its
# sidecar naming hf; `ferry train --steps 2` tokenises the JSONL through the token cache (keyed as jsonl) and
# trains; the export carries tokenizer.json with a tokenizer_config.json of the run's BOS and EOS; a line without
# "text" is an error naming the file and the line.
set -euo pipefail
ferry=$1 config=$2 tokenizer=$3 text=$4 work=$5
rm -rf "$work" && mkdir -p "$work/tokenizer"
cp "$tokenizer" "$(dirname "$tokenizer")/tokenizer_config.json" "$work/tokenizer/"
tokenizer="$work/tokenizer/$(basename "$tokenizer")"
export FERRY_CACHE_DIR="$work/cache"
fail() { echo "$1"; shift; cat "$@"; exit 1; }
# Each line of the text a document, as JSON (with a field Ferry ignores).
python_free_jsonl() {
  local n=0
  while IFS= read -r line; do
    n=$((n + 1))
    line=${line//\\/\\\\} line=${line//\"/\\\"} line=${line//$'\t'/\\t}
    printf '{"id": %d, "text": "%s"}\n' "$n" "$line"
  done
}
head -n 1500 "$text" | python_free_jsonl > "$work/train.jsonl"
docs=$(wc -l < "$work/train.jsonl")

"$ferry" tokenize --tokenizer hf --vocab "$tokenizer" --input "$work/train.jsonl" --out "$work/train.bin" > "$work/tokenize.log" 2>&1 ||
  fail "ferry tokenize failed" "$work/tokenize.log"
grep -q '"tokenizer": "hf"' "$work/train.bin.json" || fail "the sidecar does not name hf" "$work/train.bin.json"
# Every document ends with EOS (<|end_of_text|>): as many as lines. The shard's uint16 ids after its
# 1024-byte header, one a line.
eos=$(grep -o '"eos_token": *"[^"]*"' "$(dirname "$tokenizer")/tokenizer_config.json" | sed 's/.*: *"//; s/"$//')
eos_id=$(grep -o "\"id\":[0-9]*,\"content\":\"$eos\"" "$tokenizer" | sed 's/"id":\([0-9]*\).*/\1/')
[ -n "$eos_id" ] || fail "no id for $eos in $tokenizer" /dev/null
ends=$(tail -c +1025 "$work/train.bin" | od -An -v -tu2 -w2 | grep -cx " *$eos_id" || true)
[ "$ends" = "$docs" ] || fail "$ends EOS ($eos_id) in the shard of $docs documents" "$work/tokenize.log"

common=(--config "$config" --set data.path="$work/train.jsonl" --set data.tokenizer=hf --set data.vocab="$tokenizer"
        --set model.vocab_size=768 --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=32
        --set train.batch_size=4 --set train.eval_batches=1)
"$ferry" train "${common[@]}" --steps 2 --set train.checkpoint_dir="$work/ckpt" > "$work/train.log" 2>&1 || fail "ferry train failed" "$work/train.log"
grep -q "tokenising '$work/train.jsonl' ([0-9.]* MB, jsonl) with hf" "$work/train.log" || fail "train did not tokenise the JSONL" "$work/train.log"
grep -q "done: 2 steps" "$work/train.log" || fail "train did not run 2 steps" "$work/train.log"
shard=$(ls "$work"/cache/tokens/train.jsonl.*.hf.*.bin)
cmp -s <(tail -c +1025 "$shard") <(tail -c +1025 "$work/train.bin") || fail "the cache's tokens differ from ferry tokenize's" /dev/null

# The export carries the run's tokenizer.json as tokenizer.json, with a tokenizer_config.json that transformers'
# AutoTokenizer runs it by (PreTrainedTokenizerFast) naming the BOS and EOS of the run: the checkpoint's as
# state.json records them, with the tokenizer_config.json they came from away; with --config (the starting
# weights), those of the tokenizer as it is now: without that file, no EOS (null) and the post-processor's BOS.
bos=$(grep -o '"bos_token": *"[^"]*"' "$(dirname "$tokenizer")/tokenizer_config.json" | sed 's/.*: *"//; s/"$//')
mv "$(dirname "$tokenizer")/tokenizer_config.json" "$work/tokenizer_config.json.away"
"$ferry" export --checkpoint "$work/ckpt" --out "$work/hf" > "$work/hf.log" 2>&1 || fail "ferry export failed" "$work/hf.log"
"$ferry" export "${common[@]}" --out "$work/hf_start" > "$work/hf_start.log" 2>&1 || fail "ferry export --config failed" "$work/hf_start.log"
mv "$work/tokenizer_config.json.away" "$(dirname "$tokenizer")/tokenizer_config.json"
for out in hf hf_start; do
  cmp -s "$tokenizer" "$work/$out/tokenizer.json" || fail "$out: tokenizer.json is not the run's" "$work/$out.log"
  for file in vocab.json vocab.txt merges.txt; do [ ! -e "$work/$out/$file" ] || fail "$out: the export wrote $file" "$work/$out.log"; done
  eos_setting="\"eos_token\": \"$eos\""
  [ $out = hf_start ] && eos_setting='"eos_token": null'
  for setting in '"tokenizer_class": "PreTrainedTokenizerFast"' "\"bos_token\": \"$bos\"" "$eos_setting"; do
    grep -qF "$setting" "$work/$out/tokenizer_config.json" || fail "$out: tokenizer_config.json lacks $setting" "$work/$out/tokenizer_config.json"
  done
done

printf '{"text": "fine"}\n{"txt": "no text"}\n' > "$work/bad.jsonl"
if "$ferry" train "${common[@]}" --steps 2 --set data.path="$work/bad.jsonl" > "$work/bad.log" 2>&1; then fail "a line without text was accepted" "$work/bad.log"; fi
grep -q "$work/bad.jsonl:2: no \"text\" field" "$work/bad.log" || fail "the error does not name the file and line" "$work/bad.log"
echo "jsonl with tokenizer.json: tokenized, cached, trained; bad line named"
