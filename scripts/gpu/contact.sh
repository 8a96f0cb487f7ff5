#!/usr/bin/env bash
# scripts/gpu/contact.sh (run THERE, the first call on a GPU machine; standalone, under 9 minutes, every step
# under `timeout`): probe the driver, toolkit and libraries; unpack gpu_bundle/ (scripts/gpu/pack.sh); make
# the binaries run (the bundle's, else rebuilt there); run the GPU tests (gtest JSON) and compute-sanitizer
# on small op tests. Everything lands in $OUT: contact.md (the summary), contact.log, probe.txt, gtest.tar.gz.
#
#   run(carry=["gpu_bundle"], command="bash scripts/gpu/contact.sh")
#   FERRY_GPU_DRY_RUN=1 OUT=/tmp/contact bash scripts/gpu/contact.sh   # here: as far as no GPU is needed
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRIPT=contact
source "$ROOT/scripts/gpu/env.sh"
cd "$ROOT"
RESULTS=$(mktemp -d)  # gtest JSON and sanitizer logs, packed into one file ($OUT brings back 8 files at most)
trap 'tar -C "$RESULTS" -czf "$OUT/gtest.tar.gz" . 2>/dev/null; write_summary "$OUT/probe.txt" "$RESULTS/failures.txt"' EXIT

# 1. Probe: what the machine has (each line under its own timeout; a missing tool is a line, not a failure).
probe() {
  local c
  for c in "nvidia-smi" "nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm --format=csv" \
    "nvcc --version" "cat /etc/os-release" "uname -a" "ldd --version" "c++ --version" "cmake --version" "ninja --version" \
    "compute-sanitizer --version" "nproc" "free -g" "df -h /tmp" \
    "python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())'"; do
    echo "\$ $c"
    timeout 20 bash -c "$c" 2>&1 | head -40
    echo
  done
  echo "\$ libcudnn / libcublasLt (toolkit, system, ldconfig, python site-packages nvidia/*/lib)"
  ldconfig -p 2>/dev/null | grep -E 'libcudnn|libcublasLt' | head -20
  local d
  for d in ${LD_LIBRARY_PATH//:/ } /usr/local/cuda/lib64 $(cuda_library_dirs | tr : ' '); do
    ls "$d"/libcudnn*.so* "$d"/libcublasLt*.so* 2>/dev/null
  done | sort -u
}
export -f probe
step "probe (driver, toolkit, cuDNN, cuBLASLt)" 60 bash -c 'probe >"$OUT/probe.txt" 2>&1'

# 2. The bundle: .debs into the prefix, LD_LIBRARY_PATH, the test data's path.
# (In this shell, not under `timeout`: it exports LD_LIBRARY_PATH; dpkg -x of a few MB takes seconds.)
if unpack_bundle; then ROWS+=("| unpack gpu_bundle into $PREFIX, LD_LIBRARY_PATH | ok | |")
else ROWS+=("| unpack gpu_bundle | failed: see contact.log | |"); exit 1; fi
log "$(cat "$BUNDLE/MANIFEST.md" 2>/dev/null | head -8)"
step "ldd ferry (which library comes from where)" 10 ldd "$BUNDLE/bin/ferry"

# 3. Binaries that run.
if ! ready_binaries; then
  log "no runnable binaries: stopping"
  exit 1
fi
step "ferry --help" 10 "$BIN/ferry" --help
step "ferry train on device: cuda (gpt-tiny, 2 steps)" 60 "$BIN/ferry" train --config configs/gpt-tiny.yaml --steps 2 \
  --set device=cuda --set offload.cost_model=cost_models/h100-assumed.json --set train.checkpoint_dir=/tmp/ferry-contact-ckpt --overwrite-checkpoints
# The default path (issue 29): no flag but the steps, so device: auto must take the GPU, measure its links, the
# CPU and device AdamW and the op times at start-up, and budget its free memory; from a fresh folder (no earlier run's
# checkpoints in the way). Fails unless the run says "device: cuda (...)" and finishes.
step "ferry train with no other flag: device auto takes the GPU (gpt2-124m, 3 steps)" 150 bash -c \
  'cd "$(mktemp -d)" && out=$("$0" train --config "$1/configs/gpt2-124m.yaml" --steps 3 2>&1); rc=$?; printf "%s\n" "$out";
   ((rc == 0)) && grep -q "^device: cuda (" <<<"$out" && grep -q "done: 3 steps" <<<"$out"' "$BIN/ferry" "$ROOT"

# 4. The GPU tests (they skip, with the reason, where no GPU is visible: the dry run shows them skip).
gtest() {  # gtest NAME BINARY FILTER SECONDS
  step "$1 ($3)" "$4" "$BIN/$2" --gtest_filter="$3" --gtest_output=json:"$RESULTS/$1.json" --gtest_brief=1 ||
    grep -E '^\[  FAILED  \]|Failure|Expected|Which is|actual' "$LOG" | tail -40 >>"$RESULTS/failures.txt"
}
gtest cuda_device test_device 'CudaDevice.*:CudaDeviceGpu.*' 60
gtest cuda_kernels test_kernels_cuda '*' 90
gtest cuda_ops test_device '*/CudaOps.*:CudaGolden.*' 150
gtest cuda_training test_engine 'CudaTraining.*:Mfu.*' 150

# 5. compute-sanitizer on small shapes: one op test (bf16 GPT-2, every op) under each tool.
if [[ $DRY == 1 ]]; then
  log "dry run: stopping before compute-sanitizer (needs a GPU)"
  exit 0
fi
if command -v compute-sanitizer >/dev/null; then
  # Ferry's kernels alone (FERRY_ATTENTION=flash: attention through Ferry's flash kernel, not cuDNN's SDPA,
  # whose TMA/wgmma kernels racecheck and initcheck flagged on 2026-11-24: README, Ferry on an H100).
  for tool in memcheck racecheck initcheck; do
    step "compute-sanitizer --tool $tool (CudaOps gpt2_bf16, FERRY_ATTENTION=flash)" 70 env FERRY_ATTENTION=flash compute-sanitizer \
      --tool "$tool" --error-exitcode 9 --log-file "$RESULTS/sanitizer-$tool.log" "$BIN/test_device" \
      --gtest_filter='Models/CudaOps.*/gpt2_bf16' --gtest_brief=1
  done
  step "compute-sanitizer --tool memcheck (CudaOps gpt2_bf16, cuDNN SDPA)" 70 compute-sanitizer --tool memcheck --error-exitcode 9 \
    --log-file "$RESULTS/sanitizer-memcheck-cudnn.log" "$BIN/test_device" --gtest_filter='Models/CudaOps.*/gpt2_bf16' --gtest_brief=1
else
  ROWS+=("| compute-sanitizer | not on this machine | |")
fi
