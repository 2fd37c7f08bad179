#!/usr/bin/env bash
set -u
cat /root/dev/mpart.aa /root/dev/mpart.ab /root/dev/mpart.ac .d6/mpart.ad | xz -d | (mkdir -p /opt/mlxcu && tar x -C /opt/mlxcu)
tar xJf /root/dev/inc.tar.xz -C /opt/mlxcu
mkdir -p /root/bin && tar xJf .d6/bin.tar.xz -C /root/bin
nv=$(python3 -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))")/nvidia
export LD_LIBRARY_PATH=/opt/mlxcu/mlx/lib:/opt/mlxcu/mlx_cuda_13.libs:/root/bin/syslibs:$nv/cu13/lib:$nv/cudnn/lib:$nv/nccl/lib
export MLX_ENABLE_TF32=0
for a in qwen35 qwen35moe qwen3next; do
  /root/bin/gmlx perplexity tests/fixtures/$a/$a-F16.gguf --file .d6/$a.txt --json --device gpu > /root/$a.gpu.json 2>/root/$a.err || cat /root/$a.err
done
python3 .d6/compare.py | tee $OUT/hybrid-gpu-vs-cpu.txt
for a in qwen35 qwen3next; do
  echo "## $a run, gpu"; /root/bin/gmlx run tests/fixtures/$a/$a-Q8_0.gguf --raw --prompt "The capital of France is Paris. def main(): return 42" -n 16 --temperature 0 --ignore-eos --device gpu 2>/dev/null
done | tee -a $OUT/hybrid-gpu-vs-cpu.txt
