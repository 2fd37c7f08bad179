#!/usr/bin/env bash
# device call 4: join MLX CUDA, unpack gmlx, wait for llama-bench and the GGUF, run both.
set -u
cat /root/dev/mpart.aa /root/dev/mpart.ab /root/dev/mpart.ac .d4/mpart.ad | xz -d | (mkdir -p /opt/mlxcu && tar x -C /opt/mlxcu)
mkdir -p /root/bin && tar xJf .d4/bin.tar.xz -C /root/bin
nv=$(python3 -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))")/nvidia
export LD_LIBRARY_PATH=/opt/mlxcu/mlx/lib:/opt/mlxcu/mlx_cuda_13.libs:/root/bin/syslibs:$nv/cu13/lib:$nv/cudnn/lib:$nv/nccl/lib
for i in $(seq 1 120); do grep -q "build rc" /root/build.log && grep -q "gen rc" /root/gen.log && break; sleep 3; done
tail -2 /root/build.log; cat /root/gen.log; ls -la /root/dev/q.gguf
LB=/root/llama/build/bin/llama-bench
{ echo "## llama-bench"; LD_LIBRARY_PATH=/root/llama/build/bin:$LD_LIBRARY_PATH $LB -m /root/dev/q.gguf -p 512 -n 128 -r 3 -ngl 99 2>&1 | tail -6; } | tee $OUT/llama-bench.txt
{ echo "## gmlx"; /root/bin/gmlx run /root/dev/q.gguf --device gpu --bench 512 --bench-decode 128 2>&1 | tail -4;
  echo "## gmlx GMLX_BATCH_INVARIANT=1"; GMLX_BATCH_INVARIANT=1 /root/bin/gmlx run /root/dev/q.gguf --device gpu --bench 512 --bench-decode 128 2>&1 | tail -3; } | tee $OUT/gmlx-bench.txt
