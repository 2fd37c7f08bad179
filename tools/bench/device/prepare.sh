#!/usr/bin/env bash
# Prepares what the device scripts of this folder carry to a rented GPU machine (the `device`
# tool): run from the repository root on the 2-core machine.
#   tools/bench/device/prepare.sh          build and pack .mlxcu1 .mlxcu2 .dev1 .dev2, and the
#                                          default model in two parts (.devm1 .devm2) where
#                                          gmlx has fetched it
#   tools/bench/device/prepare.sh slim     take tests/fixtures out of the index (it travels
#                                          otherwise: the tracked tree is ~90 MB, one call
#                                          carries 64 MiB); commit nothing while slim (a
#                                          pre-commit hook it installs refuses such a commit)
#   tools/bench/device/prepare.sh unslim   put it back
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude=.git/info/exclude
case "${1:-}" in
  slim)
    git rm -r --cached -q tests/fixtures
    grep -qx "/tests/fixtures/" $exclude || echo "/tests/fixtures/" >> $exclude
    # a commit while slim would delete the fixtures: a local hook refuses one
    hook="$(git rev-parse --git-path hooks)/pre-commit"
    if [ ! -e "$hook" ]; then
      mkdir -p "$(dirname "$hook")"
      printf '%s\n' '#!/bin/sh' \
        'if git diff --cached --name-status | grep -q "^D[[:space:]]*tests/fixtures/"; then' \
        '  echo "pre-commit: the index is slim (tests/fixtures out of it): prepare.sh unslim" >&2' \
        '  exit 1' 'fi' > "$hook"
      chmod +x "$hook"
    fi
    exit 0 ;;
  unslim)
    git reset -q -- tests/fixtures
    sed -i '\#^/tests/fixtures/$#d' $exclude
    exit 0 ;;
esac
for d in .dev1 .dev2 .devm1 .devm2; do grep -qx "/$d/" $exclude || echo "/$d/" >> $exclude; done
# the binaries are copied from where cargo builds them
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/gmlx/target}
target=$CARGO_TARGET_DIR
# MLX's CUDA wheel in two parts (.mlxcu1, .mlxcu2), as the shared recipe splits it
../shared/tools/mlx-cuda-carry.sh
# the pinned llama.cpp sources without models/ and docs/ (for llama-bench with CUDA and gguf-py)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-binary llama-cpp-python --no-deps llama-cpp-python==0.3.36 -d "$tmp"
tar xzf "$tmp"/llama_cpp_python-0.3.36.tar.gz -C "$tmp"
src="$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp"
rm -rf "$src"/models/*.gguf* "$src"/docs "$src"/benches "$src"/media
rm -rf .dev1 .dev2 && mkdir -p .dev1 .dev2/fx "$tmp/pkg/bin/lib"
(cd "$src" && tar cf - . | xz -T2 -6 > "$OLDPWD/.dev1/llamacpp.tar.xz")
cp tests/fixtures/qwen35/qwen35-Q8_0.gguf .dev1/
# release binaries built against the CPU wheel, stripped, with the BLAS they link
cargo build --release -p gmlx-cli -p xtask
bench=$(cargo bench -p gmlx-models --bench train_attention --no-run 2>&1 | sed -n 's/.*(\(.*train_attention-[0-9a-f]*\)).*/\1/p')
kernel_test=$(cargo test --release -p gmlx-mlx --test cuda_qmv --no-run 2>&1 | sed -n 's/.*(\(.*cuda_qmv-[0-9a-f]*\)).*/\1/p')
attention_test=$(cargo test --release -p gmlx-mlx --test cuda_attention --no-run 2>&1 | sed -n 's/.*(\(.*cuda_attention-[0-9a-f]*\)).*/\1/p')
q6k_test=$(cargo test --release -p gmlx-mlx --test cuda_q6k --no-run 2>&1 | sed -n 's/.*(\(.*cuda_q6k-[0-9a-f]*\)).*/\1/p')
layer_test=$(cargo test --release -p gmlx-mlx --test cuda_layer --no-run 2>&1 | sed -n 's/.*(\(.*cuda_layer-[0-9a-f]*\)).*/\1/p')
serve_bench=$(cargo bench -p gmlx-serve --bench serve --no-run 2>&1 | sed -n 's/.*(\(.*serve-[0-9a-f]*\)).*/\1/p')
cp "$target/release/gmlx" "$target/release/xtask" "$tmp/pkg/bin/"
cp "$bench" "$tmp/pkg/bin/train_attention"
cp "$kernel_test" "$tmp/pkg/bin/test_cuda_qmv"
cp "$attention_test" "$tmp/pkg/bin/test_cuda_attention"
cp "$q6k_test" "$tmp/pkg/bin/test_cuda_q6k"
cp "$layer_test" "$tmp/pkg/bin/test_cuda_layer"
cp "$serve_bench" "$tmp/pkg/bin/serve_bench"
strip "$tmp"/pkg/bin/{gmlx,xtask,train_attention,test_cuda_qmv,test_cuda_attention,test_cuda_q6k,test_cuda_layer,serve_bench}
for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$tmp/pkg/bin/lib/"
done
(cd "$tmp/pkg" && tar cf - bin | xz -T2 -6 > "$OLDPWD/.dev2/bin.tar.xz")
cp tests/fixtures/*/*-Q4_K_M.gguf .dev2/fx/
# the default model (98 MB, over one call's 64 MiB) in two parts for device-parity.sh
model=${GMLX_CACHE_DIR:-/var/cache/gmlx/cache}/models/SmolLM2-135M-Instruct.Q4_1.gguf
rm -rf .devm1 .devm2
if [ -f "$model" ]; then
  mkdir -p .devm1 .devm2
  split -b 50000000 "$model" "$tmp/model."
  mv "$tmp/model.aa" .devm1/part.aa
  mv "$tmp/model.ab" .devm2/part.ab
else
  echo "no $model (\`gmlx run\` fetches it): device-parity.sh needs it"
fi
du -sh .mlxcu1 .mlxcu2 .dev1 .dev2 .devm1 .devm2 2>/dev/null || true
