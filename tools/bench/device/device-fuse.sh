#!/usr/bin/env bash
# device call (carry .mlxcu2 .dev2, after device-1.sh with GEN="Q4_0 Q4_K smol"): the CUDA 4-bit
# kernels' test (TEST=0 skips it), then `gmlx run --bench` on
# the Llama-3-8B-shaped Q4_0 file and the SmolLM2-135M-shaped one with the fused kernels off and
# on (GMLX_CUDA_QMV_FUSE), alternating ROUNDS times (2; SMALL_VARIANTS, VARIANTS by default,
# are the SmolLM2 file's; PROMPT the tokens before the decode, 512), then, where the machine has
# nsys (and NSYS_RUN is not 0), a
# profile of a short decode on each file: kernels, CUDA API calls and MLX's NVTX ranges (its
# host work per primitive).
set -u
. tools/bench/device/install.sh
[ "${TEST:-1}" = 1 ] && . tools/bench/device/test-kernels.sh
for i in $(seq 1 60); do [ $(cat /root/gen-*.log | grep -c "gen rc") -ge ${FILES:-3} ] && break; sleep 2; done
F8=/root/cache/bench/llama3-8b-Q4_0.gguf; FS=/root/cache/bench/smollm2-135m-Q4_0.gguf
for round in $(seq 1 ${ROUNDS:-2}); do
  VARIANTS=${VARIANTS:-GMLX_CUDA_QMV_FUSE=0 GMLX_CUDA_QMV_FUSE=1}
  for f in $F8 $FS; do
    variants=$VARIANTS; [ $f = $FS ] && variants=${SMALL_VARIANTS:-$VARIANTS}
    for v in $variants; do
      echo "## $(basename $f) round $round $v"
      env ${v//,/ } timeout 100 /root/bin/gmlx run $f --device gpu --dtype bfloat16 --bench ${PROMPT:-512} --bench-decode 128 2>&1 | grep -v "^\s*$" | tail -2
    done
  done
done 2>&1 | tee $OUT/bench-fuse.txt
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}"
[ -n "$NSYS" ] && [ "${NSYS_RUN:-1}" = 1 ] || exit 0
for f in $F8 $FS; do
  b=$(basename $f .gguf)
  timeout 150 $NSYS profile -t cuda,nvtx -o /root/prof-$b --force-overwrite true /root/bin/gmlx run $f --device gpu --dtype bfloat16 --bench 16 --bench-decode 256 > /root/prof-$b.log 2>&1
  timeout 120 $NSYS stats -r cuda_gpu_kern_sum,nvtx_sum,cuda_api_sum --format csv -o $OUT/nsys-$b /root/prof-$b.nsys-rep > /dev/null 2>&1
  tail -3 /root/prof-$b.log; ls $OUT | grep nsys-$b
done
