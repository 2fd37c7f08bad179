#!/usr/bin/env bash
# device call (carry .mlxcu2 .dev2, after device-1.sh): the CUDA 4-bit matrix-vector kernel.
# Its test against the reference dequantization, then `gmlx run --bench` on the
# Llama-3-8B-shaped files (TYPES, Q4_0 by default) with MLX's qmv (GMLX_CUDA_QMV=0) and with the
# kernel, alternating ROUNDS times (1; VARIANTS: words of comma-separated settings); then a
# checkpointed Qwen3.5-9B-shape training run with the chunked scan, which MLX's
# cache-thrashing abort stopped before gmlx turned it off.
set -u
. tools/bench/device/install.sh
. tools/bench/device/test-kernels.sh
for i in $(seq 1 60); do [ $(cat /root/gen-*.log | grep -c "gen rc") -ge 4 ] && break; sleep 2; done
for t in ${TYPES:-Q4_0}; do
  F=/root/cache/bench/llama3-8b-$t.gguf
  for round in $(seq 1 ${ROUNDS:-1}); do
    for v in ${VARIANTS:-GMLX_CUDA_QMV=0 GMLX_CUDA_QMV=1}; do
      echo "## $t round $round $v"
      env ${v//,/ } timeout 100 /root/bin/gmlx run $F --device gpu --dtype bfloat16 --bench 512 --bench-decode 128 2>&1 | grep -v "^\s*$" | tail -3
    done
  done
done 2>&1 | tee $OUT/bench-qmv.txt
[ "${TRAIN9B:-1}" = 1 ] || exit 0
Q=/root/cache/bench/qwen35-9b-Q4_K.gguf
echo "## qwen35-9b shape, rows of 1000, chunked scan, --grad-checkpoint, MLX_* unset"
timeout 100 /root/bin/gmlx train $Q --data /root/long --adapter-out /root/ad/q9/ --iters 2 --batch-size 1 --max-seq-length 1000 --device gpu --report-every 1 --grad-checkpoint 2>&1 | grep -v "^\s*$" | tail -4 | tee $OUT/train-9b-checkpoint.txt
