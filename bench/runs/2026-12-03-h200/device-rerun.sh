#!/usr/bin/env bash
set -u
tar xJf .d5/inc.tar.xz -C /opt/mlxcu
nv=$(python3 -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))")/nvidia
export LD_LIBRARY_PATH=/opt/mlxcu/mlx/lib:/opt/mlxcu/mlx_cuda_13.libs:/root/bin/syslibs:$nv/cu13/lib:$nv/cudnn/lib:$nv/nccl/lib
ls /root/dev/q.gguf || exit 3
{ echo "## gmlx"; /root/bin/gmlx run /root/dev/q.gguf --device gpu --bench 512 --bench-decode 128 2>&1 | tail -4;
  echo "## gmlx GMLX_BATCH_INVARIANT=1"; GMLX_BATCH_INVARIANT=1 /root/bin/gmlx run /root/dev/q.gguf --device gpu --bench 512 --bench-decode 128 2>&1 | tail -3; } | tee $OUT/gmlx-bench.txt
