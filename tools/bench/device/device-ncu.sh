#!/usr/bin/env bash
# device call (carry .mlxcu2 .dev2, after device-1.sh with GEN="Q4_0" BUILD=0 and FILES=1 here):
# Nsight Compute on a short decode of the Llama-3-8B-shaped Q4_0 file, gmlx's own kernels only
# (`-k regex:gmlx`: the 4-bit products and the decode attention): per kernel its time, the DRAM
# bytes it read, its achieved occupancy and registers per thread, after a 16-token prompt
# (ncu-decode.csv) and after DEPTH tokens (8000; ncu-decode-deep.csv). ncu runs each profiled
# kernel alone with cold caches, so its times are each kernel's own, not the step's.
set -u
. tools/bench/device/install.sh
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
[ -n "$NCU" ] || exit 0
for i in $(seq 1 60); do [ $(cat /root/gen-*.log | grep -c "gen rc") -ge ${FILES:-1} ] && break; sleep 2; done
F=/root/cache/bench/llama3-8b-Q4_0.gguf
M=gpu__time_duration.sum,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size
# a decode step launches 5 of gmlx's kernels per block (160 for 32 blocks): skip two steps,
# profile four
for run in "16 ncu-decode" "${DEPTH:-8000} ncu-decode-deep"; do
  set -- $run
  timeout 240 $NCU --metrics $M -k regex:gmlx --launch-skip 320 --launch-count 640 --csv \
    --print-summary per-kernel /root/bin/gmlx run $F --device gpu --dtype bfloat16 --bench $1 \
    --bench-decode 16 > $OUT/$2.csv 2> $OUT/$2.log
  echo "## $2 (prompt $1): rc $?"; grep -v "^==PROF==" $OUT/$2.csv | head -30
done
