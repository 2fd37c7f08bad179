import json, os, subprocess
home = os.path.expanduser("~/gpubin")
env = dict(os.environ, MLX_ENABLE_TF32="0")
worst = 0
for a in ["llama", "qwen3", "qwen3moe", "gpt-oss"]:
    cpu = json.load(open(f"{home}/{a}.cpu.json"))
    out = subprocess.run([f"{home}/gmlx", "perplexity", f"tests/fixtures/{a}/{a}-F16.gguf", "--file", f"{home}/{a}.txt", "--json", "--device", "gpu"], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        print(a, "FAILED", out.stderr[-2000:]); continue
    gpu = json.loads(out.stdout)
    d = max(abs(x - y) for x, y in zip(cpu["logprobs"], gpu["logprobs"]))
    worst = max(worst, d)
    print(f"{a}: {len(gpu['logprobs'])} logprobs, max |gpu - cpu| {d:.2e}, ppl cpu {cpu['perplexity']:.4f} gpu {gpu['perplexity']:.4f}")
print("worst", worst)
