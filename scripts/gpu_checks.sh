#!/usr/bin/env bash
# The GPU session's checks (docs/gpu.md), run on the GPU machine from the kit that
# scripts/gpu_kit.sh packed on a build machine (carry .gpukit, and data for `train`).
# Each step writes its log (and the benchmark its JSON) to $OUT (default gpu-out/):
#   info       nvidia-smi, the kit's commit, the libraries the module resolves to
#   tests      the CUDA tests (every op and variant against the CPU engine, cached
#              generation) and the device-choice and mirror tests
#   sanitizer  compute-sanitizer memcheck over the CUDA tests
#   racecheck  compute-sanitizer racecheck, then synccheck, over the op tests of the
#              kernels that share memory in a block (GMLP_RACE_FILTER replaces them):
#              the hazards the CUDA emulator's fibers, which switch only at barriers,
#              cannot show
#   python     the Python module's GPU tests (device="cuda"), with the machine's python3
#   bench      bench/gpu_bench.py: gmlp against PyTorch eager, torch.compile and timm
#              (bench=lm,bert: those workloads alone)
#   train      the default LM (configs/default.json) trained on the GPU in fp32 and in
#              bf16, for their validation losses against each other and the CPU's; then
#              400 bf16 steps of the annotated LM, its training loop's speed, and 300 of
#              gMLP-S/16 on image files beside `gmlp bench`'s step of that model, and 150
#              more with DeiT's augmentation (does the host keep up?), then 150 of each
#              on colour images
#   profile    where a step's time goes: gmlp's device time per op (GMLP_CUDA_PROFILE)
#              and PyTorch's per kernel (torch.profiler), the LM and BERT-size workloads
#              (profile=vision: another)
#   ncu        every kernel's device time in one bf16 training step of each bench
#              workload (Nsight Compute), summed per kernel name
#   ncu-detail the row-wise kernels (LayerNorms, the SGU's gate pass and bias + combine,
#              its spatial product with the combine) of each workload under Nsight
#              Compute's speed-of-light, occupancy and launch sections, with DRAM
#              bytes, issue slots busy, instructions executed and three stall
#              reasons: why each is slow (its bytes, or what it issues)
#   ceilings   the card's two ceilings as PyTorch reaches them: a device-to-device copy
#              (bytes read and written) and an 8192-cube bf16 product on random data
# Usage: bash scripts/gpu_checks.sh STEP...   (a device call runs at most 10 minutes;
# scripts/gpu_session.sh fits the steps into one call's budget)
# Environment: GMLP_STEP_TIMEOUT (seconds) stops each step after that long (exit 124,
# logged); GMLP_TEST_FILTER replaces the sanitizer's test filter (gpu_session.sh gives a
# second sanitizer run the tests the first did not reach); GMLP_BENCH_ARGS goes to
# bench/gpu_bench.py in the bench and profile steps (--passes 2, --impls '^gmlp').
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
[[ -f .gpukit/kit.tar.xz ]] || { echo "gpu_checks.sh: no .gpukit/kit.tar.xz (run scripts/gpu_kit.sh where the build is, and carry .gpukit)" >&2; exit 1; }
K=/tmp/gmlp-gpukit
if [[ ! -f $K/source_dir ]]; then mkdir -p "$K" && tar -C "$K" -xJf .gpukit/kit.tar.xz || exit 1; fi
(($#)) || { echo "usage: scripts/gpu_checks.sh info|ceilings|tests|sanitizer|racecheck|python|bench|train|profile|ncu|ncu-detail ..." >&2; exit 1; }

# The binaries name their source and build directories by absolute path (fixtures, the
# CUDA module): make that path lead here, and build/ lead to the kit.
src=$(cat "$K/source_dir")
if [[ $src != "$root" && ! -e $src ]]; then mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; fi
# The binaries know their build directory's name (build-gpukit/); the scripts, build/.
for name in build "$(cat "$K/build_name" 2>/dev/null || echo build)"; do
  if [[ ! -e $root/$name ]]; then ln -s "$K/build" "$root/$name"; fi
done

# The kit's copies of the compiler's runtime go only where the machine lacks them or
# has an older one: a newer libstdc++ serves these binaries, and an older one forced on
# compute-sanitizer would break it.
for lib in libstdc++.so.6 libgcc_s.so.1 libgomp.so.1 libz.so.1 libudev.so.1; do
  sys=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ {print $NF; exit}')
  [[ -n $sys && -f $K/lib/$lib ]] || continue
  [[ $lib == libstdc++.so.6 ]] && ! grep -q GLIBCXX_3.4.30 "$sys" && continue
  rm -f "$K/lib/$lib"
done
# cuBLAS (and NCCL, which the module opens for a multi-GPU job) come from the machine:
# the CUDA toolkit's directories, or the pip wheels PyTorch brought (nvidia-cublas,
# nvidia-nccl).
cublas_dirs=$( (ls -d /usr/local/cuda*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib 2>/dev/null
  python3 - <<'PY' 2>/dev/null
import glob, os, site
for s in site.getsitepackages():
    for lib in ("libcublas.so*", "libnccl.so*"):
        for p in glob.glob(os.path.join(s, "nvidia", "**", lib), recursive=True):
            print(os.path.dirname(p))
PY
) | sort -u | tr '\n' ':')
libs="$K/lib:${cublas_dirs}${LD_LIBRARY_PATH:-}"
libs=${libs%:}
# gmlp finds its libraries through a wrapper, so that Python (the benchmark) keeps its own.
if [[ ! -f $K/build/gmlp.bin ]]; then
  mv "$K/build/gmlp" "$K/build/gmlp.bin"
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "$(dirname "$0")/gmlp.bin" "$@"\n' "$libs" > "$K/build/gmlp"
  chmod +x "$K/build/gmlp"
fi
T=build/tests/gmlp_tests
# Not the data-parallel tests on the emulator (Distributed.*CudaEmulator*): they need
# mpirun, which the GPU machine lacks, and no GPU.
FILTER='*Cuda*:*SeparateMemory*:DeviceChoice.*-Distributed.*'

status=0
step() { # name, command...: runs it with its log in $out/name.log and records a failure
  local name=$1; shift
  echo "== $name: $*" | tee "$out/$name.log"
  local t0=$SECONDS
  local limit=()
  [[ -n ${GMLP_STEP_TIMEOUT:-} ]] && limit=(timeout -k 10 "$GMLP_STEP_TIMEOUT")
  "${limit[@]}" "$@" >> "$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$out/$name.log"
  ((rc == 0)) || status=1
  tail -n 25 "$out/$name.log"
}

for s in "$@"; do
  case $s in
    info)
      step info bash -c "nvidia-smi; echo kit commit \$(cat '$K/commit'); export LD_LIBRARY_PATH='$libs'; \
        ldd build/libgmlp_cuda.so; ! ldd build/libgmlp_cuda.so build/gmlp.bin $T | grep 'not found'; build/gmlp bench --device cuda --config configs/tiny.json --repeats 3" ;;
    ceilings)
      step ceilings python3 bench/gpu_ceilings.py ;;
    tests)
      # Each test's line and time in the log (no --gtest_brief): gpu_session.sh reads them.
      # Then the LayerNorm's and the SGU's tests again with a block per row throughout
      # (GMLP_CUDA_LN_WARP_COLUMNS=0, as the bench's row of that name runs): the
      # block kernels' rows of up to 768 channels, S/16's gate of a thread's 3 among them.
      step tests bash -c "export LD_LIBRARY_PATH='$libs'; '$T' --gtest_filter='$FILTER'; rc=\$?
        GMLP_CUDA_LN_WARP_COLUMNS=0 '$T' --gtest_filter='CudaOps.LayerNorm*:CudaOps.Sgu*:CudaBf16.*' || rc=1
        exit \$rc" ;;
    sanitizer)
      # The GPU suites alone (CudaOps, Variants/CudaModel, ...), not the tests of the
      # device choice or the emulator's data-parallel runs.
      # NCCL's set-up asks the runtime about its kernels for every architecture it was
      # built for and takes the "no kernel image" answers in its stride; compute-sanitizer
      # reports each such answer as an error (8 in CudaNccl's test, all inside
      # ncclCommInitRank, on an H200). That test runs alone with API errors unreported;
      # its memory accesses are checked as every other test's are.
      step sanitizer bash -c "export LD_LIBRARY_PATH='$libs'
        compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 50 $T \
          --gtest_filter='${GMLP_TEST_FILTER:-Cuda*:*/Cuda*}-CudaNccl.*' || exit
        [[ '${GMLP_TEST_FILTER:-CudaNccl}' != *CudaNccl* ]] ||
          compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $T --gtest_filter='CudaNccl.*'" ;;
    racecheck)
      # Shared memory: the spatial product's tiles (mix_tiles.cuh), the LayerNorms' and
      # the column sums' block reductions, the SGU's gate pass, the cross-entropy's rows,
      # the embedding's ranking, AdamW's norm, the decoder's ops. synccheck runs only
      # where racecheck passed.
      race=${GMLP_RACE_FILTER:-CudaOps.TheSpatialProduct*:CudaOps.LayerNorm*:CudaOps.ColumnSums*:CudaOps.Linear*:CudaOps.SguHolding*:CudaOps.CrossEntropy*:CudaOps.EmbeddingBackward*:CudaOps.AResidual*:CudaOps.AdamW*:CudaOps.DecodeOps*}
      step racecheck bash -c "export LD_LIBRARY_PATH='$libs'
        compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 50 $T --gtest_filter='$race' || exit
        compute-sanitizer --tool synccheck --error-exitcode 9 --print-limit 50 $T --gtest_filter='$race'" ;;
    python)
      # The Python module on the GPU (python/tests/test_device.py: a model, generation,
      # training and bf16 with device="cuda", each against the CPU) under the machine's
      # python3, which gpu_kit.sh built the kit's module for.
      step python bash -c "suffix=\$(python3 -c 'import sysconfig; print(sysconfig.get_config_var(\"EXT_SUFFIX\"))')
        [[ -f build/python/gmlp/_core\$suffix ]] ||
          { echo \"gpu_checks.sh: the kit has no Python module for this python3 (_core\$suffix; it has: \$(cd build/python/gmlp 2>/dev/null && ls _core*))\"; exit 1; }
        export LD_LIBRARY_PATH='$libs' PYTHONPATH='$root/build/python' GMLP_EXE='$root/build/gmlp' GMLP_SOURCE_DIR='$root'
        python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_device.py" ;;
    ncu)
      # Every kernel's device time in one bf16 training step of each bench workload
      # (ncu, clocks as found), summed by kernel name: what the op profile cannot split.
      for w in lm bert vision; do
        cmd=$(python3 bench/gpu_bench.py --workloads $w --print-gmlp-command bf16 --warmup 1 --repeats 1) || { status=1; continue; }
        step "ncu-$w" bash -c "ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
          --print-units base --csv --log-file '$out/ncu-$w.csv' $cmd > /dev/null && python3 bench/ncu_table.py '$out/ncu-$w.csv'"
      done ;;
    ncu-detail)
      # A few launches of each row-wise kernel, forward and backward apart (a step runs
      # every layer's forward first), each replayed for its sections: a few seconds a run.
      metrics=dram__bytes_read.sum,dram__bytes_write.sum,smsp__warp_issue_stalled_no_instruction_per_warp_active.pct
      metrics+=,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct
      metrics+=,sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
      for w in lm bert vision; do
        cmd=$(python3 bench/gpu_bench.py --workloads $w --print-gmlp-command bf16 --warmup 1 --repeats 1) || { status=1; continue; }
        for part in forward:'ln_forward|k_bias_combine|k_mix_then' backward:'ln_backward|k_back_gate'; do
          step "ncu-detail-$w-${part%%:*}" bash -c "ncu --profile-from-start off --clock-control none \
            --kernel-name regex:'${part#*:}' --launch-count 8 --section SpeedOfLight --section Occupancy \
            --section LaunchStats --metrics $metrics --print-units base --csv \
            --log-file '$out/ncu-detail-$w-${part%%:*}.csv' $cmd > /dev/null &&
            python3 bench/ncu_table.py --detail '$out/ncu-detail-$w-${part%%:*}.csv'"
        done
      done ;;
    bench | bench=*)
      # bench=lm,bert runs those workloads alone (each torch.compile takes a while: the
      # three may not fit one 10-minute call), into a JSON file of their own.
      w=lm,bert,vision
      [[ $s == bench=* ]] && w=${s#bench=}
      step "bench-${w//,/-}" python3 bench/gpu_bench.py --workloads "$w" --json "$out/gpu-results-${w//,/-}.json" \
        ${GMLP_BENCH_ARGS:-} ;;
    train)
      [[ -f data/kjv.txt ]] || { echo "gpu_checks.sh: train needs data/kjv.txt (carry data/kjv.txt)" >&2; status=1; continue; }
      # The run directories stay on the machine (their checkpoints are too large to
      # bring back); their metrics come back. bf16 must end within 2% of fp32's loss.
      for p in fp32 bf16; do
        step "train-$p" build/gmlp train --device cuda --precision $p --config configs/default.json \
          --out /tmp/gmlp-default-$p --overwrite --no-progress
        cp /tmp/gmlp-default-$p/metrics.jsonl "$out/train-$p-metrics.jsonl" 2>/dev/null
      done
      # The issue's check: bf16's last validation loss within 2% of fp32's (and both
      # beside the CPU's, 1.4077 nats at step 2400 since session 29).
      step train-check python3 bench/train_check.py "$out"
      # The annotated LM under `gmlp train`, bf16: its tok/s lines beside the bench's
      # step, the training loop's own host work (until session 43 every step scanned,
      # and downloaded, the whole gradient; docs/bench-gpu.md).
      step train-annotated build/gmlp train --device cuda --precision bf16 --config configs/annotated.json \
        --set train.steps=400 --set train.eval_every=100000 --set train.ckpt_every=100000 --set train.log_every=50 \
        --out /tmp/gmlp-annotated --overwrite --no-progress
      # gMLP-S/16 trained from image files (512 random 224x224 grey images in IDX; one
      # channel, batch 64, bf16), its img/s lines beside `gmlp bench`'s step of the same
      # model, whose batch stays on the device: since session 44 each batch is drawn, and
      # its images sent up, while the step before runs (src/train/batch_ahead.h).
      python3 -c 'import pathlib, sys; sys.path.insert(0, "bench"); import host_side
host_side.write_idx_set(pathlib.Path("/tmp/gmlp-images"))'
      vision=(--precision bf16 --config configs/gmlp-s.json --set model.image_channels=1 --set model.n_classes=10
              --batch-size 64)
      step train-vision build/gmlp train --device cuda "${vision[@]}" --data /tmp/gmlp-images \
        --set train.steps=300 --set train.eval_every=100000 --set train.ckpt_every=100000 --set train.log_every=50 \
        --out /tmp/gmlp-vision --overwrite --no-progress
      # The same run with DeiT's recipe (host_side.py's vision-files-deit: mirror images,
      # RandAugment, erasing, mixup or CutMix, smoothed targets) in shuffled epochs with
      # repeated augmentation and the weights' average: its img/s beside train-vision's say
      # whether the host's augmentation keeps up with the GPU's step (session 54 measured
      # its cost on a 2-core host only, docs/vision.md).
      deit=()
      for kv in $(python3 -c 'import sys; sys.path.insert(0, "bench"); import host_side
print(" ".join(host_side.VISION_RECIPES["vision-files-deit"]))'); do deit+=(--set "$kv"); done
      deit+=(--set train.shuffle=true --set train.repeated_aug=3 --set train.model_ema=0.99996)
      # The shorter runs below: 150 steps, logged every 50, no evaluation or checkpoint.
      short=(--set train.steps=150 --set train.eval_every=100000 --set train.ckpt_every=100000 --set train.log_every=50)
      step train-vision-deit build/gmlp train --device cuda "${vision[@]}" --data /tmp/gmlp-images "${deit[@]}" "${short[@]}" \
        --out /tmp/gmlp-vision-deit --overwrite --no-progress
      # The host's side again on colour images (512 random 224x224 PPM files, three times
      # the bytes a row to augment and send up): the plain run and DeiT's recipe.
      python3 -c 'import pathlib, sys; sys.path.insert(0, "bench"); import host_side
host_side.write_image_folder(pathlib.Path("/tmp/gmlp-rgb"))'
      rgb=("${vision[@]}" --set model.image_channels=3)
      step train-vision-rgb build/gmlp train --device cuda "${rgb[@]}" --data /tmp/gmlp-rgb "${short[@]}" \
        --out /tmp/gmlp-vision-rgb --overwrite --no-progress
      step train-vision-rgb-deit build/gmlp train --device cuda "${rgb[@]}" --data /tmp/gmlp-rgb "${deit[@]}" "${short[@]}" \
        --out /tmp/gmlp-vision-rgb-deit --overwrite --no-progress
      step bench-vision-64 build/gmlp bench --device cuda "${vision[@]}" --mode train --warmup 5 --repeats 50
      step bench-vision-64-rgb build/gmlp bench --device cuda "${rgb[@]}" --mode train --warmup 5 --repeats 50 ;;
    profile | profile=*)
      w=lm,bert
      [[ $s == profile=* ]] && w=${s#profile=}
      step "profile-${w//,/-}" python3 bench/gpu_bench.py --profile "$out/profile-${w//,/-}.txt" --workloads "$w" \
        --warmup 3 --repeats 5 ${GMLP_BENCH_ARGS:-} ;;
    *) echo "gpu_checks.sh: unknown step '$s' (info, ceilings, tests, sanitizer, racecheck, python, ncu, ncu-detail, bench, train or profile)" >&2; status=1 ;;
  esac
done
exit $status
