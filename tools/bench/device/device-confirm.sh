#!/usr/bin/env bash
# device call (carry .mlxcu2 .dev2, after device-1.sh and a call that installed MLX CUDA on the
# same machine): a setting chosen from an A/B (SETTING: VAR=value, comma-separated) checked by
# the CUDA kernels' tests under it, then the `xtask bench gpu` table under it (device-4.sh:
# TYPES, ROUNDS, FILES), so that a default flipped after this call is what the table measured.
set -u
. tools/bench/device/install.sh
for s in ${SETTING//,/ }; do export "$s"; done
echo "## test_cuda_qmv with ${SETTING:-defaults}"
GMLX_CUDA_QMV=1 /root/bin/test_cuda_qmv --nocapture 2>&1 | tail -8 | tee $OUT/test-cuda-qmv.txt
case "${SETTING:-}" in *GMLX_CUDA_Q6K=0*) ;; *)
  echo "## test_cuda_q6k"; /root/bin/test_cuda_q6k --nocapture 2>&1 | tail -6 | tee $OUT/test-cuda-q6k.txt ;;
esac
if [ "${ATTENTION:-0}" = 1 ]; then
  echo "## test_cuda_attention with ${SETTING:-defaults}"
  GMLX_CUDA_ATTENTION=1 /root/bin/test_cuda_attention --nocapture 2>&1 | tail -6 | tee $OUT/test-cuda-attention.txt
fi
. tools/bench/device/device-4.sh
