#!/usr/bin/env bash
# device call 1: stash the first MLX part, unpack llama.cpp, build llama-bench (CUDA) and write
# the random GGUF in the background.
set -u
mkdir -p /root/dev /root/llama
cp .d1/mpart.aa /root/dev/
tar xJf .d1/llamacpp.tar.xz -C /root/llama
export PATH=/usr/local/cuda/bin:$PATH
which nvcc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import numpy; print('numpy', numpy.__version__)"
cp tools/bench/random_gguf.py tests/fixtures/qwen35/qwen35-Q8_0.gguf /root/dev/
cd /root/llama
setsid nohup bash -c 'cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF > /root/build.log 2>&1 && cmake --build build -j14 --target llama-bench >> /root/build.log 2>&1; echo "build rc=$?" >> /root/build.log' > /dev/null 2>&1 < /dev/null &
cd /root/dev
setsid nohup bash -c 'PYTHONPATH=/root/llama/gguf-py python3 random_gguf.py qwen35-9b /root/dev/q.gguf --vocab-from qwen35-Q8_0.gguf > /root/gen.log 2>&1; echo "gen rc=$?" >> /root/gen.log' > /dev/null 2>&1 < /dev/null &
sleep 5; tail -3 /root/build.log
