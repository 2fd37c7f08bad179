#!/usr/bin/env bash
# device call 1 (carry .mlxcu1 .dev1): stash MLX CUDA's first part, unpack the pinned llama.cpp
# sources (llama-cpp-python 0.3.36 sdist, vendor/llama.cpp without models/ and docs/), then in
# the background build llama-bench with CUDA where `xtask bench gpu` looks for it (unless
# BUILD=0: the build loads 14 of the 16 cores, which slows a host-bound decode beside it) and
# write the random files it reads (GEN: Llama-3-8B shape in Q4_0, Q4_K, Q8_0; the Qwen3.5-9B
# shape; the SmolLM2-135M shape in Q4_0), plus long rows of text for the 9B training runs.
set -u
mkdir -p /root/mlxcu /root/llama /root/cache/bench /root/long /root/ad
cp .mlxcu1/part.aa /root/mlxcu/
tar xJf .dev1/llamacpp.tar.xz -C /root/llama
cp tools/bench/random_gguf.py .dev1/qwen35-Q8_0.gguf /root/
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; date -u
which nvcc cmake python3; nproc; free -g | head -2; df -h /root | tail -1
B=/root/cache/llama.cpp-cuda-build
[ "${BUILD:-1}" = 1 ] && setsid nohup bash -c "cmake -S /root/llama -B $B -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF > /root/build.log 2>&1 && cmake --build $B -j ${JOBS:-14} --target llama-bench >> /root/build.log 2>&1; echo build rc=\$? >> /root/build.log" > /dev/null 2>&1 < /dev/null &
cd /root
for t in ${GEN:-qwen35 Q4_0 Q4_K Q8_0 smol}; do
  case $t in
    qwen35) set -- qwen35-9b cache/bench/qwen35-9b-Q4_K Q4_K ;;
    smol) set -- smollm2-135m cache/bench/smollm2-135m-Q4_0 Q4_0 ;;
    *) set -- llama3-8b cache/bench/llama3-8b-$t $t ;;
  esac
  setsid nohup bash -c "PYTHONPATH=/root/llama/gguf-py python3 random_gguf.py $1 $2.partial --vocab-from qwen35-Q8_0.gguf --type $3 > /root/gen-$t.log 2>&1 && mv $2.partial $2.gguf; echo gen rc=\$? >> /root/gen-$t.log" > /dev/null 2>&1 < /dev/null &
done
python3 - <<'PY'
import json, random
random.seed(0)
words = "the a river stone light north quiet market harbor winter letter garden bridge field ancient signal copper lantern orchard valley".split()
with open("/root/long/train.jsonl", "w") as f:
    for _ in range(4):
        f.write(json.dumps({"text": " ".join(random.choice(words) for _ in range(7000))}) + "\n")
PY
sleep 15; tail -2 /root/build.log; cat /root/gen-*.log; ls -la /root/cache/bench
