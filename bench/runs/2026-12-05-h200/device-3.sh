#!/usr/bin/env bash
# device call 3: `xtask bench gpu` (the xtask binary, as `cargo xtask bench gpu` runs it) once
# the llama-bench build and the files of call 1 are there.
set -u
nv=$(python3 -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))")/nvidia
export LD_LIBRARY_PATH=/opt/mlxcu/mlx/lib:/opt/mlxcu/mlx_cuda_13.libs:/root/bin/lib:$nv/cu13/lib:$nv/cudnn/lib:$nv/nccl/lib
export GMLX_CACHE_DIR=/root/cache GMLX_BENCH_RUNS=$OUT CARGO_MANIFEST_DIR=$PWD/xtask
for i in $(seq 1 100); do grep -q "build rc" /root/build.log && [ $(cat /root/gen-*.log | grep -c "gen rc") -ge 6 ] && break; sleep 3; done
tail -1 /root/build.log; cat /root/gen-*.log; ls -la /root/cache/bench
/root/bin/xtask bench gpu --gmlx /root/bin/gmlx --llama-cpp /root/llama --python python3 2>&1 | tee $OUT/bench-gpu.txt
