#!/usr/bin/env bash
# Runs the runtime's GPU tests (one process per test: a sticky fault poisons its process), the CPU tests and
# bench_runtime on the GPU machine, with logs under $OUT. Usage (repo root): tests/gpu/runtime_device_run.sh
set -u
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
B=${B:-build-runtime}
OUT=${OUT:-/tmp/ft-runtime-out}
mkdir -p "$OUT"
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$S" 2>&1
{ "$B/facetrace" info; "$B/facetrace" info --json; FACETRACE_GPU_ISOLATION=off "$B/facetrace" info; } > "$OUT/info.txt" 2>&1
for t in $("$B/runtime_gpu_test" --gtest_list_tests | awk '/^[^ ]/{s=$1} /^  /{print s $1}'); do
  timeout 120 "$B/runtime_gpu_test" --gtest_filter="$t" >> "$OUT/gpu_tests.log" 2>&1
  echo "gpu $t rc=$?" >> "$S"
done
timeout 120 "$B/runtime_unit_test" > "$OUT/cpu_tests.log" 2>&1
echo "cpu runtime_unit_test rc=$? $(tail -1 "$OUT/cpu_tests.log")" >> "$S"
timeout 240 "$B/bench_runtime" > "$OUT/bench.jsonl" 2> "$OUT/bench_stderr.txt"
echo "bench rc=$?" >> "$S"
cat "$S"
grep -E "^\[ (recovery|in-process) \]|Failure|FAILED|SKIPPED" -A3 "$OUT/gpu_tests.log" | head -40
cat "$OUT/info.txt"
tail -12 "$OUT/bench_stderr.txt"
