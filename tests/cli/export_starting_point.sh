#!/usr/bin/env bash
# export_starting_point.sh FERRY CONFIG DATA WORK: `ferry export --config` writes the weights a run starts from
# with no step trained: for gpt-tiny from the seed, the same bytes as the export of a one-step run at lr 0 (the
# old workaround); for a sentence-transformers folder (model.init_from), its weights bitwise and its files.
# Then the folder rules: a folder holding files is refused naming them, --overwrite replaces only the export's.
set -uo pipefail
ferry=$1 config=$2 data=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAILED: $1"; shift; cat "$@" 2> /dev/null; exit 1; }
tiny=(--set model.n_layer=1 --set train.eval_batches=1 --set train.seed=11)

"$ferry" export --config "$config" "${tiny[@]}" --out "$work/start" > "$work/start.log" 2>&1 || fail "export --config" "$work/start.log"
grep -q "exported the weights a run of .* starts from (no step trained: the initialisation of train.seed)" "$work/start.log" \
  || fail "what was exported" "$work/start.log"
"$ferry" train --config "$config" "${tiny[@]}" --steps 1 --set optim.lr=0 --set optim.weight_decay=0 \
  --set train.checkpoint_dir="$work/ckpt" > "$work/train.log" 2>&1 || fail "the lr-0 run" "$work/train.log"
"$ferry" export --checkpoint "$work/ckpt" --out "$work/trained" > "$work/trained.log" 2>&1 || fail "export --checkpoint" "$work/trained.log"
cmp -s "$work/start/model.safetensors" "$work/trained/model.safetensors" || fail "the starting weights differ from a step at lr 0's" /dev/null

# A sentence-transformers folder: its weights byte for byte (the tensors under bert.), its files copied.
st=$(cd "$(dirname "$0")/../data/hf_sentence_transformer" && pwd)
printf 'model: {init_from: %s, init_missing: [head]}\ndata: {path: %s, tokenizer: wordpiece}\n' "$st" "$data" > "$work/st.yaml"
"$ferry" export --config "$work/st.yaml" --out "$work/st" > "$work/st.log" 2>&1 || fail "export of the sentence-transformers folder" "$work/st.log"
grep -q "no step trained: model.init_from's, byte for byte" "$work/st.log" || fail "what was exported" "$work/st.log"
grep -q "^initialised from train.seed (model.init_from lacks them; model.init_missing): cls.predictions.bias, " "$work/st.log" \
  || fail "the head initialised is not named" "$work/st.log"
for f in modules.json sentence_bert_config.json config_sentence_transformers.json 1_Pooling/config.json README.md vocab.txt; do
  cmp -s "$st/$f" "$work/st/$f" || fail "$f is not copied as it is" "$work/st.log"
done
grep -q "^copied from the source: 1_Pooling/config.json, README.md, config_sentence_transformers.json, modules.json, sentence_bert_config.json$" \
  "$work/st.log" || fail "the files copied are not listed" "$work/st.log"

# Into a folder holding files: refused naming them, nothing written; with --overwrite the user's file is kept.
echo mine > "$work/st/notes.txt"
cp "$work/st/config.json" "$work/config_before.json"
"$ferry" export --config "$work/st.yaml" --out "$work/st" > "$work/again.log" 2>&1 && fail "a folder holding files was written into" "$work/again.log"
grep -q "holds files already (1_Pooling/, README.md, config.json, .*notes.txt.*add --overwrite" "$work/again.log" || fail "the refusal" "$work/again.log"
"$ferry" export --config "$work/st.yaml" --out "$work/st" --overwrite > "$work/over.log" 2>&1 || fail "--overwrite" "$work/over.log"
[ "$(cat "$work/st/notes.txt")" = mine ] || fail "--overwrite lost the user's file" "$work/over.log"
grep -q "^replaced (--overwrite): model.safetensors, config.json, " "$work/over.log" && grep -q "^kept, not written by this export: notes.txt$" "$work/over.log" \
  || fail "what was replaced and kept" "$work/over.log"
cat "$work/start.log" "$work/st.log" "$work/over.log"
echo "starting weights exported, bitwise; the folder's files kept"
