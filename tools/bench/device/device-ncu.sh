#!/usr/bin/env bash
# device call (carry .mlxcu2 .dev2, after device-1.sh with GEN="Q4_0" BUILD=0 and FILES=1 here):
# Nsight Compute on a short decode of the Llama-3-8B-shaped Q4_0 file, every kernel (gmlx's and
# MLX's): per kernel and launch shape its time, the DRAM bytes it read, its achieved occupancy
# and registers per thread, after a 16-token prompt (ncu-decode.csv) and after DEPTH tokens
# (8000; ncu-decode-deep.csv; DEEP=0 skips it). TEST=1 runs the kernel tests first. ncu runs each kernel alone with cold caches, so its times are
# each kernel's own, not the step's; a decode kernel's invocations divided by the decoded
# tokens (DECODE, plus the bench's warm-up) give its launches per step. DETAIL (a kernel name's
# regex, e.g. norm_rope_three): Nsight Compute's full set of sections (stall reasons, memory
# workload, occupancy) for DETAIL_COUNT (1) of its decode launches, once under each of DETAIL_VARIANTS
# (settings; "X=0" for none), in ncu-detail-<n>.txt; MAIN=0 skips the per-kernel runs before.
set -u
. tools/bench/device/install.sh
[ "${TEST:-0}" = 1 ] && . tools/bench/device/test-kernels.sh
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
[ -n "$NCU" ] || exit 0
for i in $(seq 1 60); do [ $(cat /root/gen-*.log | grep -c "gen rc") -ge ${FILES:-1} ] && break; sleep 2; done
F=/root/cache/bench/llama3-8b-Q4_0.gguf
M=gpu__time_duration.sum,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
# the deep run profiles only the decode attention (the prompt's own kernels would be thousands)
# the 16-token run skips the load's and the prompt's launches (SKIP, about 2 900 on the 8B shape:
# profiling them takes minutes) and profiles COUNT after them (1 200: about five decode steps)
runs=()
[ "${MAIN:-1}" = 1 ] && runs+=("16 ncu-decode . --launch-skip ${SKIP:-2900} --launch-count ${COUNT:-1200}")
[ "${MAIN:-1}" = 1 ] && [ "${DEEP:-1}" = 1 ] && runs+=("${DEPTH:-8000} ncu-decode-deep gmlx_attend_decode")
for run in "${runs[@]}"; do
  set -- $run
  timeout ${LIMIT:-200} $NCU --clock-control none ${4:-} ${5:-} ${6:-} ${7:-} --metrics $M -k regex:$3 --csv --print-summary per-kernel /root/bin/gmlx run $F \
    --device gpu --dtype bfloat16 --bench $1 --bench-decode ${DECODE:-32} > $OUT/$2.csv 2> $OUT/$2.log
  echo "## $2 (prompt $1): rc $?"
  python3 tools/bench/device/ncu_summary.py $OUT/$2.csv | head -40
done
n=0; for v in ${DETAIL:+${DETAIL_VARIANTS:-X=0}}; do
  n=$((n + 1))
  env ${v//,/ } timeout ${LIMIT:-200} $NCU --clock-control none --set full -k regex:$DETAIL --launch-skip 64 --launch-count ${DETAIL_COUNT:-1} \
    /root/bin/gmlx run $F --device gpu --dtype bfloat16 --bench 16 --bench-decode 8 > $OUT/ncu-detail-$n.txt 2>&1
  echo "## detail $n ($DETAIL, $v): rc $?"
  grep -E "^  [a-z_:]*gmlx|Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued" $OUT/ncu-detail-$n.txt | head -40
done
