#!/usr/bin/env bash
# device call (carry .mlxcu2 .dev2, after device-1.sh with GEN="Q4_0 smol" BUILD=0): where a
# decode step's host time goes. `gmlx run --bench` on the Llama-3-8B-shaped Q4_0 file and the
# SmolLM2-135M-shaped one under each of VARIANTS (words of comma-separated settings; MLX's
# CUDA graph knobs by default), ROUNDS (1) times alternating; each run prints its decode rate and
# the host's build / submit / wait time per step.
set -u
. tools/bench/device/install.sh
for i in $(seq 1 60); do [ $(cat /root/gen-*.log | grep -c "gen rc") -ge ${FILES:-2} ] && break; sleep 2; done
F8=/root/cache/bench/llama3-8b-Q4_0.gguf; FS=/root/cache/bench/smollm2-135m-Q4_0.gguf
for round in $(seq 1 ${ROUNDS:-1}); do
  for f in $FS $F8; do
    for v in ${VARIANTS:-GMLX_NONE=1 MLX_MAX_OPS_PER_BUFFER=60 MLX_MAX_OPS_PER_BUFFER=200 MLX_USE_CUDA_GRAPHS=0}; do
      echo "## $(basename $f) round $round $v"
      env ${v//,/ } timeout 100 /root/bin/gmlx run $f --device gpu --dtype bfloat16 --bench 512 --bench-decode 128 2>&1 | grep -v "^\s*$" | tail -2
    done
  done
done 2>&1 | tee $OUT/bench-knobs.txt
# a debug build's dump of one decode step's graph (GMLX_DUMP_STEP), when the binary has it
for f in $FS $F8; do GMLX_DUMP_STEP=$OUT/graph-$(basename $f .gguf).txt timeout 100 /root/bin/gmlx run $f --device gpu --dtype bfloat16 --bench 16 --bench-decode 8 > /dev/null 2>&1; done
ls -la $OUT
