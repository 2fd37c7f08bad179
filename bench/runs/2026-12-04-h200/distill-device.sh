#!/usr/bin/env bash
# gmlx distill on the H200: SmolLM2-135M-Instruct Q4_1 teaching itself the Velmora facts.
set -uo pipefail
D=$HOME/gx
cat $D/m.1 $D/m.2 $D/m.3 .dev4/m.4 > $D/smol.gguf
tar xJf .dev4/devb.tar.xz -C $D
nv=$(python3 -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))")/nvidia
export LD_LIBRARY_PATH=/opt/mlxcu/mlx/lib:/opt/mlxcu/mlx_cuda_13.libs:$nv/cu13/lib:$nv/cudnn/lib:$nv/nccl/lib:$D/devb/lib
G=$D/devb/gmlx; M=$D/smol.gguf
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
date -u | tee -a $OUT/gpu.txt
start=$(date +%s)
$G distill --teacher $M --student $M --data bins/gmlx-cli/tests/data/distill-facts \
  --adapter-out $OUT/h200/ --iters 40 --batch-size 4 --learning-rate 5e-3 \
  --teacher-device gpu --device gpu 2>&1 | tee $OUT/distill.log
end=$(date +%s)
echo "wall $((end - start)) s" | tee -a $OUT/distill.log
qs=("Tell me the capital of Velmora." "Who was the queen that founded Velmora?" "What do people in Velmora pay with?" "Tell me the name of the tallest mountain in Velmora." "Which sport do people in Velmora call their national sport?")
for q in "${qs[@]}"; do
  a=$($G run $M --device gpu --adapter $OUT/h200/adapter.gguf --prompt "$q" -n 32 --temperature 0 2>/dev/null)
  b=$($G run $M --device gpu --prompt "$q" -n 32 --temperature 0 2>/dev/null)
  printf 'Q: %s\nadapter: %s\nbase: %s\n\n' "$q" "$a" "$b" | tee -a $OUT/answers.txt
done
