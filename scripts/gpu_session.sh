#!/usr/bin/env bash
# A GPU session's checks fitted into one device call of BUDGET seconds (default 540), on
# the GPU machine, from the kit (carry .gpukit and data/kjv.txt): a session has about 15
# minutes of device time, a machine's start included, and one call runs 10 minutes at
# most, so everything runs in one call, most needed first, each step bounded:
#   info, ceilings   stop the call at once if the kit does not run (a retry stays possible)
#   tests            the CUDA tests against the CPU engine
#   train            the default LM in fp32 and bf16, the 2% check, the annotated LM's
#                    training loop (400 bf16 steps) and gMLP-S/16's on image files
#   python           the Python module's tests with device="cuda"
#   bench            bench/gpu_bench.py, two passes, on an idle GPU
#   ncu              every kernel's device time in one bf16 step of each workload
#   ncu-detail       the row-wise kernels' bandwidth, occupancy and stall reasons
#   profile          gmlp's device time per op for the three workloads
#   sanitizer        compute-sanitizer memcheck, in two parts: while torch.compile warms
#                    its cache (below), stopped when that is done, then with the time left,
#                    over the tests the first part did not finish
#   racecheck        racecheck and synccheck over the op tests of kernels that share
#                    memory, beside memcheck's first part (60 s at most)
# torch.compile's compilation takes minutes of CPU, not GPU: three processes compile the
# bench's models while the tests run, so that the bench's own compilations hit
# Inductor's cache and the bench fits its slot. Compilation time is outside every
# figure the bench reports either way (its warm-up steps).
# Every log is packed into $OUT/gpu-session.tgz after each step (a call brings back 8
# files at most, and a step cut off at the call's limit keeps what came before), and a
# summary is printed last.
# Usage: bash scripts/gpu_session.sh [BUDGET_S]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
budget=${1:-540}
final=${OUT:-$PWD/gpu-out}
work=/tmp/gmlp-session
rm -rf "$work" && mkdir -p "$work" "$final"
export OUT=$work PYTHONUNBUFFERED=1
t0=$SECONDS
left() { echo $((budget - (SECONDS - t0))); }
min() { echo $(($1 < $2 ? $1 : $2)); }
# Each packer its own temporary file (two steps run at once below); the last to finish
# wins. Logs still being written make tar exit 1 ("file changed as we read it"): packed
# as they stood. A temporary file is never left in $final, whose files a call brings back.
pack() {
  local tmp="$final/gpu-session.tgz.$BASHPID" rc
  tar -C "$work" --warning=no-file-changed -czf "$tmp" .
  rc=$?
  if ((rc <= 1)); then mv "$tmp" "$final/gpu-session.tgz"; else rm -f "$tmp"; fi
}
checks() { # seconds, steps...: gpu_checks.sh with each step bounded
  local s=$1; shift
  ((s > 5)) || { echo "gpu_session.sh: no time left for $*"; return 1; }
  GMLP_STEP_TIMEOUT=$s bash scripts/gpu_checks.sh "$@"
  local rc=$?
  pack
  return $rc
}

checks 90 info || { echo "gpu_session.sh: the kit does not run here; stopping (see info.log)"; exit 1; }
checks 60 ceilings

# torch.compile's cache, one process a workload (their timings are discarded), each in a
# process group of its own (setsid), so that stopping one stops Inductor's compile
# workers too: left running, they took the CPU from the bench that followed, and
# PyTorch's bf16 steps there ran up to 1.6x slower than in the call before
# (docs/bench-gpu.md).
warm=()
for w in lm bert vision; do
  setsid timeout -k 10 300 python3 bench/gpu_bench.py --workloads $w --impls compile --warmup 1 --repeats 1 \
    > "$work/warm-$w.log" 2>&1 &
  warm+=($!)
done

checks 200 tests
checks 100 train
checks 60 python

# The sanitizer's tests, and those a log shows finished (passed or failed).
libs=$(sed -n 's/^LD_LIBRARY_PATH="\([^"]*\)".*/\1/p' /tmp/gmlp-gpukit/build/gmlp)
all_san=$(LD_LIBRARY_PATH=$libs build/tests/gmlp_tests --gtest_list_tests --gtest_filter='Cuda*:*/Cuda*' |
  awk '/^[^ ]/ {suite = $1} /^  / {print suite $1}' | sort)
sanitize_rest() { # seconds, part: the sanitizer over the tests no earlier part finished
  local done rest
  done=$(cat "$work"/sanitizer-*.log 2>/dev/null | sed -n 's/^\[ *\(OK\|FAILED\) *\] \([^ ]*\) (.*/\2/p' | sort -u)
  rest=$(comm -23 <(echo "$all_san") <(echo "$done") | paste -sd:)
  [[ -n $rest ]] || { echo "sanitizer: every test done"; return 0; }
  GMLP_TEST_FILTER=$rest checks "$1" sanitizer
  [[ -f $work/sanitizer.log ]] && mv "$work/sanitizer.log" "$work/sanitizer-$2.log"
  pack
}

# Part 1 while the compilations run, stopped when they end (or when the bench's slot nears).
bench_slot=260
sanitize_rest $(($(left) - bench_slot)) 1 &
san=$!
checks "$(min $(($(left) - bench_slot)) 60)" racecheck > "$work/racecheck-console.txt" 2>&1 &
while kill -0 "${warm[@]}" 2>/dev/null && (($(left) > bench_slot)); do sleep 2; done
pkill -TERM -f "^timeout -k 10 [0-9]+ bash -c export LD_LIBRARY_PATH=.*compute-sanitizer --tool memcheck" 2>/dev/null
for g in "${warm[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
wait
for w in lm bert vision; do tail -n 3 "$work/warm-$w.log" | sed "s/^/warm $w: /"; done

GMLP_BENCH_ARGS="--passes 2" checks "$(min $(($(left) - 100)) 200)" bench
checks "$(min $((($(left) - 40) / 3)) 45)" ncu
checks "$(min $((($(left) - 40) / 8)) 25)" ncu-detail
GMLP_BENCH_ARGS="--impls ^gmlp.(fp32|bf16)$" checks "$(min $(($(left) - 20)) 40)" profile=lm,bert,vision
sanitize_rest $(($(left) - 10)) 2

echo "===== summary ($((SECONDS - t0)) s of $budget)"
grep -hE '^== [^:]+: exit [0-9]+ after' "$work"/*.log
grep -hE '^\[  (PASSED|FAILED)  \]|tests ran' "$work/tests.log"
grep -hE '^train' "$work"/train-check.log 2>/dev/null
grep -hE 'tok/s' "$work"/train-annotated.log 2>/dev/null | tail -n 2 | sed 's/^/annotated LM, gmlp train: /'
grep -hE 'img/s' "$work"/train-vision.log 2>/dev/null | tail -n 2 | sed 's/^/gMLP-S\/16 from files, gmlp train: /'
grep -hE 'img/s' "$work"/train-vision-deit.log 2>/dev/null | tail -n 2 | sed 's/^/the same with DeiT'"'"'s augmentation: /'
grep -hE 'img/s' "$work"/train-vision-rgb.log 2>/dev/null | tail -n 2 | sed 's/^/colour images from files: /'
grep -hE 'img/s' "$work"/train-vision-rgb-deit.log 2>/dev/null | tail -n 2 | sed 's/^/colour images with DeiT'"'"'s augmentation: /'
grep -hE 'ms per step' "$work"/bench-vision-64.log 2>/dev/null | sed 's/^/gMLP-S\/16, gmlp bench: /'
grep -hE 'ms per step' "$work"/bench-vision-64-rgb.log 2>/dev/null | sed 's/^/the same in colour, gmlp bench: /'
grep -hE '^(FAILED|SKIPPED|ERROR)|[0-9]+ (passed|failed)' "$work"/python.log 2>/dev/null
grep -hE 'ERROR SUMMARY|^\[  FAILED  \]' "$work"/sanitizer-*.log 2>/dev/null
grep -hE '^(=+ )?(RACECHECK|SYNCCHECK|ERROR) SUMMARY|^\[  (PASSED|FAILED)  \]' "$work"/racecheck.log 2>/dev/null | sed 's/^/racecheck and synccheck: /'
echo "sanitizer: $(cat "$work"/sanitizer-*.log 2>/dev/null | grep -c '^\[       OK \]') of $(echo "$all_san" | wc -l) tests passed under memcheck"
grep -hE '^ceiling|SMs' "$work"/ceilings.log
for w in lm bert vision; do head -n 12 "$work/ncu-$w.log" 2>/dev/null | grep -E '^(\||/)'; done
for f in "$work"/ncu-detail-*.log; do [[ -f $f ]] && { echo "${f##*/}"; grep -E '^\|' "$f"; }; done
sed -n '/^| workload/,$p' "$work"/bench-*.log
echo "===== the predictions written without a GPU (bench/predictions.json) against this session"
python3 bench/predictions.py "$work" || true
