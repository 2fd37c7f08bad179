#!/usr/bin/env bash
# Sourced by a call script after install.sh: the CUDA kernels' tests, each in KERNEL_TESTS
# ("qmv attention q6k" by default: the 4-bit products against the reference dequantization,
# test-cuda-qmv.txt; the decode attention, test-cuda-attention.txt; the Q6_K kernels,
# test-cuda-q6k.txt), and where one fails, again under compute-sanitizer (the faulting access
# and its address; test-cuda-<name>-sanitizer.txt). TEST_ENV: settings (VAR=value,
# comma-separated, space between settings) under which the 4-bit and attention tests run again
# (test-cuda-qmv-<n>.txt, test-cuda-attention-<n>.txt), e.g.
# TEST_ENV="GMLX_CUDA_ATTENTION_BLOCKS=1008"; DEFAULTS=0 runs only those.
if [ "${DEFAULTS:-1}" = 1 ]; then
for t in ${KERNEL_TESTS:-qmv attention q6k}; do
  echo "## test_cuda_$t"
  GMLX_CUDA_QMV=1 GMLX_CUDA_ATTENTION=1 /root/bin/test_cuda_$t --nocapture 2>&1 | tail -70 | tee $OUT/test-cuda-$t.txt
  if grep -q "test result: FAILED\|panicked" $OUT/test-cuda-$t.txt && command -v compute-sanitizer > /dev/null; then
    GMLX_CUDA_QMV=1 GMLX_CUDA_ATTENTION=1 timeout 200 compute-sanitizer --tool memcheck /root/bin/test_cuda_$t --nocapture 2>&1 | head -60 | tee $OUT/test-cuda-$t-sanitizer.txt
  fi
done
fi
n=0; for e in ${TEST_ENV:-}; do
  n=$((n + 1)); echo "## test_cuda_qmv and test_cuda_attention with $e"
  env GMLX_CUDA_QMV=1 ${e//,/ } /root/bin/test_cuda_qmv --nocapture 2>&1 | tail -8 | tee $OUT/test-cuda-qmv-$n.txt
  env GMLX_CUDA_ATTENTION=1 ${e//,/ } /root/bin/test_cuda_attention --nocapture 2>&1 | tail -8 | tee $OUT/test-cuda-attention-$n.txt
done
