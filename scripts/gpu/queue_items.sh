# scripts/gpu/queue_items.sh: the GPU queue's items that are more than one command (bench/gpu-queue.md names
# them in its command column). Sourced by queue.sh THERE, after env.sh: BIN, GPU, RES, LOG and step() are set.
# Each writes its results under $RES as the repository lays them out (bench/results/..., configs/...).

# gtests BINARY [ARGS...]: a test binary with gtest JSON into $RES/gtest/, its failures into the log.
gtests() {
  local binary=$1; shift
  mkdir -p "$RES/gtest"
  "$BIN/$binary" "$@" --gtest_brief=1 --gtest_output=json:"$RES/gtest/$binary.json"
}

# The default path of issue 29: no flag but the steps, from a fresh folder; must say "device: cuda (" and finish.
default_path() {
  local out rc=0
  out=$(cd "$(mktemp -d)" && "$BIN/ferry" train --config "$ROOT/configs/gpt2-124m.yaml" --steps 3 2>&1) || rc=$?
  printf '%s\n' "$out"
  mkdir -p "$RES/bench/results"
  { echo "# ferry train with no other flag on $GPU ($(date -u +%Y-%m-%d))"; echo
    echo "Command: \`ferry train --config configs/gpt2-124m.yaml --steps 3\` (exit $rc)"; echo; echo '```'
    printf '%s\n' "$out" | tail -40; echo '```'; } >"$RES/bench/results/default-path-$GPU.md"
  ((rc == 0)) && grep -q "^device: cuda (" <<<"$out" && grep -q "done: 3 steps" <<<"$out"
}

# Ferry's GPU step (with its op breakdown) and PyTorch's compiled step, same shape and call (issue 31).
step_vs_torch() {
  local r=$RES/bench/results
  mkdir -p "$r"
  "$BIN/ferry-bench" step --device cuda --config configs/gpt2-124m.yaml --batch 16 --seq 1024 --steps 10 --warmup 3 \
    --set train.precision=bf16 --json "$r/step-gpt2-124m-$GPU.json" --markdown "$r/step-gpt2-124m-$GPU.md" || return
  python3 bench/baselines/torch_step.py --batch 16 --seq 1024 --steps 20 --warmup 5 --json "$r/step-gpt2-124m-$GPU-torch.jsonl"
}

# Issue 31's breakdown on GPT-2 1.5B's block shape (n_embd 1600, 25 heads, batch 4 x 1024, bf16), 6 of its 48 blocks
# resident: the shape whose recomputed blocks make most of the offloaded step, op by op against the roofline.
step_1p5b_blocks() {
  local r=$RES/bench/results
  mkdir -p "$r"
  "$BIN/ferry-bench" step --device cuda --config configs/gpt2-1.5b.yaml --batch 4 --seq 1024 --steps 10 --warmup 3 \
    --set model.n_layer=6 --set offload.overlap=backward --set train.precision=bf16 \
    --json "$r/step-gpt2-1.5b-6-blocks-$GPU.json" --markdown "$r/step-gpt2-1.5b-6-blocks-$GPU.md"
}

# Ferry's GPU step and llm.c's train_gpt2cu (its default recompute 1, and 0), same shape, bf16, in one call
# (issue 31, item 4); the binary is carried when bench/baselines/build_llmc.sh built it before pack.sh.
step_vs_llmc() {
  local r=$RES/bench/results
  mkdir -p "$r"
  local llmc=$BIN/train_gpt2cu
  [[ -x $llmc ]] || llmc=$BUNDLE/bin/train_gpt2cu  # Ferry's binaries rebuilt there: llm.c's stays in the bundle
  [[ -x $llmc ]] || { echo "no train_gpt2cu in the bundle: run bench/baselines/build_llmc.sh, then scripts/gpu/pack.sh"; return 1; }
  "$BIN/ferry-bench" step --device cuda --config configs/gpt2-124m.yaml --batch 16 --seq 1024 --steps 10 --warmup 3 \
    --set train.precision=bf16 --json "$r/step-gpt2-124m-$GPU-beside-llmc.json" || return
  llmc=$(with_libs "$llmc") || return
  python3 bench/baselines/llmc_step.py --binary "$llmc" --batch 16 --seq 1024 --steps 20 --warmup 5 \
    --json "$r/step-gpt2-124m-$GPU-llmc.jsonl" --log "$r/step-gpt2-124m-$GPU-llmc.log" || return
  python3 bench/step_report.py --ferry "$r/step-gpt2-124m-$GPU-beside-llmc.json" \
    --baselines "$r/step-gpt2-124m-$GPU-llmc.jsonl" "$r/step-gpt2-124m-$GPU-torch.jsonl" --out "$r/step-gpt2-124m-$GPU-side-by-side"
}

# Nsight Compute on one GPT-2 124M step (bf16, 16 x 1024): every launch of the memory-bound kernels (LayerNorm,
# cross-entropy, GELU, residual, embedding, LayerNorm's column sums), with their speed of light, occupancy, launch
# and warp-stall sections, for issue 31's kernel work: the step's op table says which ops are far from their
# roofline, this says why. Needs ncu reading counters (a Firecracker machine; KINDS.md): else the row fails saying so.
kernel_profile() {
  command -v ncu >/dev/null || { echo "no ncu on this machine"; return 1; }
  local r=$RES/bench/results csv
  mkdir -p "$r"
  csv=$r/kernel-profile-gpt2-124m-$GPU.csv
  # ncu's report into its own file (--log-file), the step's own output to the log; the stall reasons as metrics
  local stalls
  stalls=$(printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' long_scoreboard short_scoreboard \
    barrier mio_throttle lg_throttle math_pipe_throttle wait not_selected)
  stalls=${stalls%,}
  local metrics=()  # only where this ncu knows them: an unknown metric fails the whole run
  ncu --query-metrics 2>/dev/null | grep -c '^smsp__average_warps_issue_stalled_long_scoreboard' >/dev/null &&
    metrics=(--metrics "$stalls")  # grep -c reads it all: no SIGPIPE for a pipefail shell
  ncu --clock-control none --kernel-name 'regex:(ln_|ce_|gelu_|residual_|embedding_|column_|target_sums)' \
    --launch-count 160 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    "${metrics[@]}" --csv --page details --log-file "$csv" "$BIN/ferry-bench" step --device cuda \
    --config configs/gpt2-124m.yaml --batch 16 --seq 1024 --steps 1 --warmup 0 --set train.precision=bf16 ||
    { tail -20 "$csv"; return 1; }
  python3 bench/ncu_summary.py "$csv" --out "${csv%.csv}.md" && cat "${csv%.csv}.md"  # the table; the CSV kept whole
  gzip -f "$csv"
}

# The links, CPU AdamW and op times `ferry train` measures at start-up on this GPU, saved for planning elsewhere.
cost_model() {
  local r=$RES/bench/results
  mkdir -p "$r" "$RES/configs/cost_models"
  "$BIN/ferry-bench" pcie --reps 9 --json "$r/pcie-$GPU.json" --markdown "$r/pcie-$GPU.md" || return
  (cd "$(mktemp -d)" && "$BIN/ferry" train --config "$ROOT/configs/gpt2-124m.yaml" --steps 1 --set device=cuda \
    --save-cost-model "$RES/configs/cost_models/$GPU-measured.json")
}

# offload_row POLICY: GPT-2 1.5B at 16 GiB, bf16, batch 4, overlap backward and pipelined, measured vs predicted.
offload_row() {
  local r=$RES/bench/results
  mkdir -p "$r"
  "$BIN/ferry-bench" offload --config configs/gpt2-1.5b.yaml --steps 5 --policy "$1" --overlap backward --overlap pipelined \
    --set device=cuda --set offload.gpu_budget=16GiB --set train.precision=bf16 --set train.batch_size=4 \
    --json "$r/offload-gpt2-1.5b-$1-$GPU.json" --markdown "$r/offload-gpt2-1.5b-$1-$GPU.md"
}

# GPT-2 124M with the GPU's whole free memory as its budget: resident against greedy, which on 2026-11-28 (H200)
# streamed one bucket of 7 (14.8M parameters) for a predicted 1.3% gain: is the gain real, or within the model's error?
offload_124m() {
  local r=$RES/bench/results
  mkdir -p "$r"
  "$BIN/ferry-bench" offload --config configs/gpt2-124m.yaml --steps 10 --repeats 2 --policy resident --policy greedy \
    --overlap backward --set device=cuda --set train.precision=bf16 \
    --json "$r/offload-gpt2-124m-resident-vs-greedy-$GPU.json" --markdown "$r/offload-gpt2-124m-resident-vs-greedy-$GPU.md"
}

# Issue 34's goal: a Llama-3.1-8B-shaped model (GQA, llama3 rope, untied head; 8.03B parameters, 4 x 2048 tokens,
# bf16) at 16 GiB, greedy pipelined, 3 steps on the machine's host memory (about 95 GiB of exact state): measured vs
# predicted (the README's plan table says 3.36 s with the assumed cost model; the row's plan uses the one measured here).
llama_step() {
  local r=$RES/bench/results
  mkdir -p "$r"
  "$BIN/ferry-bench" offload --config configs/llama-3.1-8b.yaml --steps 3 --policy greedy --overlap pipelined \
    --set device=cuda --set offload.gpu_budget=16GiB --set train.precision=bf16 \
    --json "$r/offload-llama-3.1-8b-greedy-$GPU.json" --markdown "$r/offload-llama-3.1-8b-greedy-$GPU.md"
}

# max_model_ferry LAYERS: GPT-7B's width at this depth, 3 steps at 16 GiB (bench/report.py --max-model reads it).
max_model_ferry() {
  local r=$RES/bench/results
  mkdir -p "$r"
  local ferry
  ferry=$(with_libs "$BIN/ferry") || return
  python3 bench/baselines/ferry_run.py --policy greedy --overlap backward --ferry "$ferry" --model gpt-7b \
    --n-layer "$1" --batch 1 --budget 16GiB --steps 3 --warmup 1 --json "$r/max-model-$GPU.jsonl"
}

# compute-sanitizer's three tools on one small op test (bf16 GPT-2, every op) through Ferry's own kernels
# (FERRY_ATTENTION=flash: cuDNN's SDPA kernels are flagged by racecheck and initcheck, README's GPU notes).
sanitize() {
  command -v compute-sanitizer >/dev/null || { echo "no compute-sanitizer on this machine"; return 1; }
  mkdir -p "$RES/gtest"
  local tool rc=0
  for tool in memcheck racecheck initcheck; do
    FERRY_ATTENTION=flash compute-sanitizer --tool "$tool" --error-exitcode 9 --log-file "$RES/gtest/sanitizer-$tool.log" \
      "$BIN/test_device" --gtest_filter='Models/CudaOps.*/gpt2_bf16' --gtest_brief=1 || rc=$?
  done
  return $rc
}

# --- The baselines (issue 30): DeepSpeed from the carried bench/baselines/wheels-gpu/, each row with the matching
# Ferry run in the same row, every result a line of bench/results/compare-$GPU/<row>.jsonl (bench/report.py).
# The machine's cores for OpenMP, DeepSpeed's JIT-built ops kept for the call's later rows.
export TORCH_EXTENSIONS_DIR=/tmp/torch-extensions

# baselines_ready: DeepSpeed and its dependencies installed into $BASELINE_SITE (once a machine), and
# DeepSpeedCPUAdam built for this CPU (DeepSpeed's JIT build with ninja and -march=native, as its users get it),
# with ds_report and the build's output kept in compare-$GPU/deepspeed-build.txt.
baselines_ready() {
  export PYTHONPATH=$BASELINE_SITE PYTHONUNBUFFERED=1
  local out=$RES/bench/results/compare-$GPU
  mkdir -p "$out"
  if [[ ! -f $BASELINE_SITE/.ready ]]; then
    [[ -d $ROOT/bench/baselines/wheels-gpu ]] || { echo "no bench/baselines/wheels-gpu: run bench/baselines/fetch.sh here and carry it"; return 1; }
    local wheels
    mapfile -d '' wheels < <(find "$ROOT/bench/baselines/wheels-gpu" -maxdepth 1 -type f -print0)
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$BASELINE_SITE" \
      "${wheels[@]}" || return
    # torch must start its own cuDNN (2026-11-28: the bundle's library path gave it the toolkit's 9.14 instead)
    python3 -c 'import torch; print("torch", torch.__version__, "starts cuDNN", torch.backends.cudnn.version())' || {
      echo "torch cannot start cuDNN with LD_LIBRARY_PATH=$MACHINE_LD_LIBRARY_PATH (python3 runs with the machine's path)"
      return 1; }
    touch "$BASELINE_SITE/.ready"
  fi
  [[ -f $BASELINE_SITE/.built ]] && return 0  # once a machine: a later call's log would only say it loaded the build
  { echo "# DeepSpeed on $GPU: the CPU (lscpu: cores and threads, for OMP_NUM_THREADS), ds_report, then"
    echo "# DeepSpeedCPUAdam's build ($(date -u +%FT%TZ))"
    lscpu 2>/dev/null || grep -m4 -E 'model name|siblings|cpu cores' /proc/cpuinfo
    python3 -c 'import sys; from deepspeed.env_report import cli_main; sys.argv = ["ds_report"]; cli_main()'
    python3 -c 'import time; from deepspeed.ops.op_builder import CPUAdamBuilder as B; b = B(); t = time.time(); b.load(verbose=True)
print("cpu_adam: simd", b.simd_width(), "arch", b.cpu_arch(), "cxx_args", b.cxx_args(), "load s %.1f" % (time.time() - t))'
  } >"$out/deepspeed-build.tmp" 2>&1 || { cat "$out/deepspeed-build.tmp"; return 1; }
  mv "$out/deepspeed-build.tmp" "$out/deepspeed-build.txt" && touch "$BASELINE_SITE/.built"
  tail -3 "$out/deepspeed-build.txt"
}

# ferry_init MODEL: the weights Ferry starts MODEL from, exported once a machine as the Hugging Face folder every
# system of a row starts from (Ferry as model.init_from, the baselines with --init-from). A large model's export is
# sharded (an index and its shards, no model.safetensors: 2026-11-28 re-exported GPT-2 1.5B for every row); the
# export's own marker says it finished.
ferry_init() {
  local dir=${FERRY_INIT_DIR:-/tmp/ferry-init}/$1
  [[ -f $dir/.exported ]] && { echo "$dir"; return; }
  rm -rf "$dir" && mkdir -p "$(dirname "$dir")"
  "$BIN/ferry" export --config "$ROOT/configs/$1.yaml" --out "$dir" >&2 && touch "$dir/.exported" && echo "$dir"
}

# row_shape ARGS...: what both systems of a row share into ROW_SHAPE: --model (a shape of bench/baselines/common.py
# with a configs/<model>.yaml; default gpt2-1.5b), --batch (4), --budget (16GiB), --steps (10) and --warmup (3: the
# untimed steps first) when ARGS give them, Ferry's learning-rate schedule shortened to the run (3 warmup steps, then the
# cosine to lr / 10) so that the loss curves move. The other ARGS, the baseline's own, into ROW_REST.
row_shape() {
  ROW_MODEL=gpt2-1.5b ROW_REST=()
  local batch=4 budget=16GiB steps=10 warmup=3
  while (($#)); do
    case $1 in
      --model) ROW_MODEL=$2; shift 2 ;;
      --batch) batch=$2; shift 2 ;;
      --budget) budget=$2; shift 2 ;;
      --steps) steps=$2; shift 2 ;;
      --warmup) warmup=$2; shift 2 ;;
      *) ROW_REST+=("$1"); shift ;;
    esac
  done
  ROW_SHAPE=(--model "$ROW_MODEL" --batch "$batch" --budget "$budget" --steps "$steps" --warmup "$warmup" --lr-warmup-steps 3)
}

# ferry_line ROW POLICY OVERLAP INIT OUT: Ferry's line for ROW_SHAPE, POLICY and OVERLAP appended to OUT. Run once a
# machine (its /tmp) and binary, and copied into every later row that shares them, marked `"ran_for_row"` with the
# row that ran it: the rows of one session share the machine, and each copy saves the minute a 1.5B run takes. A
# run that did not train is written to OUT but not kept: the next row runs it again.
ferry_line() {
  local row=$1 policy=$2 overlap=$3 init=$4 out=$5 dir=${FERRY_LINES:-${TMPDIR:-/tmp}/ferry-lines} cache ferry line
  cache=$dir/$({ printf '%s\n' "${ROW_SHAPE[@]}" "$policy" "$overlap" "$init"; cksum <"$BIN/ferry"; } | cksum | cut -d' ' -f1).json
  if [[ ! -s $cache ]]; then
    mkdir -p "$dir" && rm -f "$cache.run"
    ferry=$(with_libs "$BIN/ferry") || return
    python3 bench/baselines/ferry_run.py "${ROW_SHAPE[@]}" --policy "$policy" --overlap "$overlap" \
      --ferry "$ferry" --init-from "$init" --json "$cache.run" || return
    line=$(python3 -c 'import json, sys; d = json.loads(open(sys.argv[1]).read().splitlines()[-1]); d["ran_for_row"] = sys.argv[2]
print(json.dumps(d))' "$cache.run" "$row") || return
    printf '%s\n' "$line" >>"$out"
    [[ $line == *'"trained": true'* ]] && printf '%s\n' "$line" >"$cache"
    return 0
  fi
  cat "$cache" >>"$out"
}

# compare_row ROW FERRY_POLICY FERRY_OVERLAP [--model M] [--batch N] [--budget G] BASELINE_ARGS...: Ferry's line
# (ferry_line) and one zero_offload.py run, both into compare-$GPU/ROW.jsonl, from the same starting weights and
# batches on the same machine (row_shape: what else they share).
compare_row() {
  local row=$1 policy=$2 overlap=$3; shift 3
  row_shape "$@"
  baselines_ready || return
  local init out=$RES/bench/results/compare-$GPU/$row.jsonl
  init=$(ferry_init "$ROW_MODEL") || return
  ferry_line "$row" "$policy" "$overlap" "$init" "$out" || return
  local deepspeed=(python3 bench/baselines/zero_offload.py "${ROW_SHAPE[@]}" --init-from "$init" --json "$out" "${ROW_REST[@]}")
  PYTHONPATH=${BASELINE_PYTHONPATH:-$PYTHONPATH} "${deepspeed[@]}" || return
  # DeepSpeed's default buckets first, as its users start; where they run out of the budget, 2e8 (its and Hugging
  # Face's guides' value for a GPU short of memory), the first line kept as the reason.
  [[ " ${ROW_REST[*]} " == *" --bucket-size "* ]] && return 0
  tail -n 1 "$out" | grep -c '"error": "out of GPU memory' >/dev/null || return 0
  echo "compare_row: $row ran out of the budget with DeepSpeed's default buckets: again with 2e8"
  PYTHONPATH=${BASELINE_PYTHONPATH:-$PYTHONPATH} "${deepspeed[@]}" --bucket-size 2e8
}

# zenflow_row ROW ARGS...: compare_row with DeepSpeed 0.19.6 (the carried wheels-gpu/zenflow/) in place of 0.19.8:
# from 0.19.7 on, ZeRO-1/2 hand the model its bf16 weights with a plain view of ZenFlow's transposed flat buffer
# (stage_1_and_2.py: _update_model_bit16_weights), so every 2-D weight is scrambled at initialize.
zenflow_row() {
  local site=/tmp/site-zenflow
  baselines_ready || return
  if [[ ! -f $site/.ready ]]; then
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$site" \
      "$ROOT"/bench/baselines/wheels-gpu/zenflow/* && touch "$site/.ready" || return
  fi
  BASELINE_PYTHONPATH=$site:$BASELINE_SITE TORCH_EXTENSIONS_DIR=/tmp/torch-extensions-zenflow compare_row "$@"
}

# DeepSpeedCPUAdam and Ferry's CPU AdamW over GPT-2 1.5B's parameters on every core, same row.
cpu_adam_pair() {
  local r=$RES/bench/results
  baselines_ready || return
  "$BIN/ferry-bench" adam --params 1560000000 --threads 0 --reps 3 --json "$r/cpu_adam-$GPU.json" --markdown "$r/cpu_adam-$GPU.md" || return
  python3 bench/baselines/cpu_adam.py --params 1560000000 --reps 5 --json "$r/cpu_adam-deepspeed-$GPU.json" --markdown "$r/cpu_adam-deepspeed-$GPU.md"
}

# gemini_ready: Colossal-AI from the carried bench/baselines/wheels-gemini/ into $BASELINE_SITE, installed without
# its torch <= 2.5.1 pin, an empty stand-in for bitsandbytes (imported for GaLore only, 43 MB), and HybridAdam's
# kernels (CPU Adam, fused GPU Adam) JIT-built with nvcc for sm_90, the build's output kept.
gemini_ready() {
  baselines_ready || return
  export MAX_JOBS=$(nproc) TORCH_CUDA_ARCH_LIST=9.0
  local out=$RES/bench/results/compare-$GPU stub=$BASELINE_SITE/bitsandbytes
  if [[ ! -f $BASELINE_SITE/.gemini ]]; then
    [[ -d $ROOT/bench/baselines/wheels-gemini ]] || { echo "no bench/baselines/wheels-gemini: run bench/baselines/fetch.sh here and carry it"; return 1; }
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$BASELINE_SITE" \
      "$ROOT"/bench/baselines/wheels-gemini/* || return
    mkdir -p "$stub/optim" && : >"$stub/__init__.py" && : >"$stub/optim/__init__.py" &&
      echo 'class Optimizer2State: pass  # stand-in: only GaLore subclasses it' >"$stub/optim/optimizer.py"
    touch "$BASELINE_SITE/.gemini"
  fi
  [[ -f $BASELINE_SITE/.gemini-built ]] && return 0
  python3 -c 'import time, colossalai; from colossalai.kernel.kernel_loader import CPUAdamLoader, FusedOptimizerLoader
t = time.time(); CPUAdamLoader().load(); FusedOptimizerLoader().load()
print("colossalai", colossalai.__version__, "kernels built or loaded in %.1f s" % (time.time() - t))' >"$out/gemini-build.tmp" 2>&1 ||
    { tail -40 "$out/gemini-build.tmp"; return 1; }
  mv "$out/gemini-build.tmp" "$out/gemini-build.txt" && touch "$BASELINE_SITE/.gemini-built"
  tail -2 "$out/gemini-build.txt"
}

# gemini_row ROW [--model M] [--batch N] [--budget G] GEMINI_ARGS...: Ferry greedy `pipelined` and one gemini.py
# run, as compare_row does for DeepSpeed.
gemini_row() {
  local row=$1; shift
  row_shape "$@"
  gemini_ready || return
  local init out=$RES/bench/results/compare-$GPU/$row.jsonl
  init=$(ferry_init "$ROW_MODEL") || return
  ferry_line "$row" greedy pipelined "$init" "$out" || return
  python3 bench/baselines/gemini.py "${ROW_SHAPE[@]}" --init-from "$init" --json "$out" "${ROW_REST[@]}"
}

# Every function here and in env.sh, for the rows' `bash -c` (queue.sh checks each row's function is exported).
mapfile -t QUEUE_FUNCTIONS < <(compgen -A function)
export -f "${QUEUE_FUNCTIONS[@]}"
