import json, sys
worst = 0.0
for a in ["qwen35", "qwen35moe", "qwen3next"]:
    cpu = json.load(open(f".d6/{a}.cpu.json")); gpu = json.load(open(f"/root/{a}.gpu.json"))
    key = [k for k, v in cpu.items() if isinstance(v, list) and v and isinstance(v[0], float)][0]
    d = max(abs(x - y) for x, y in zip(cpu[key], gpu[key]))
    worst = max(worst, d)
    print(f"{a}: {len(cpu[key])} logprobs, max |gpu - cpu| {d:.3g}, ppl cpu {cpu.get('perplexity')} gpu {gpu.get('perplexity')}")
print("worst", worst)
