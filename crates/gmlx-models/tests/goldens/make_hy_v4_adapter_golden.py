"""llama.cpp golden for a LoRA adapter on the `hy_v4` fixture.

Writes a random rank-4 adapter (seed 7, alpha 4 so the scale is 1) in llama.cpp's adapter
format on every projection llama.cpp's hy-v4 graph applies adapters to (`build_lora_mm`: each
block's `attn_output`, the dense FFN of block 0, the shared experts of blocks 1-2), then runs
llama.cpp on a float32 copy of tests/fixtures/hy_v4/hy_v4-F16.gguf (f32 KV cache) with it:
logits at every position of the fixture's 280-token prompt plus llama.cpp's own 8 greedy
tokens with the adapter (top-16 ids and 32 fixed ids per position). The Rust test
(`tests/adapter_targets.rs`) applies the same adapter in gmlx and must agree within 1e-3.

llama.cpp's graph multiplies the latent projections (`attn_q_a`, `attn_q_b`, `attn_kv_a_mqa`,
`attn_gate`, the indexer's) without adapters, so an adapter on them cannot be compared with
llama.cpp; the Rust test checks that gmlx applies one on each of them instead.

Environment as for make_smollm2_golden.py. Usage:
make_hy_v4_adapter_golden.py BASE.gguf ADAPTER_OUT.gguf OUT.json
"""
import json
import os
import sys
import tempfile

import gguf
import llama_cpp
import numpy as np

from reference import float32_copy, greedy, open_llama, positions

BASE, ADAPTER, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
RANK = 4
PROMPT_LEN = 280
N_PREDICT = 8
TOP = 16
FIXED_IDS = sorted(np.random.default_rng(99).choice(288, 32, replace=False).tolist())
TARGETS = (
    [f"blk.{b}.attn_output.weight" for b in range(3)]
    + [f"blk.0.ffn_{p}.weight" for p in ("gate", "up", "down")]
    + [f"blk.{b}.ffn_{p}_shexp.weight" for b in (1, 2) for p in ("gate", "up", "down")]
)


def write_adapter(base: str, path: str) -> None:
    shapes = {t.name: [int(n) for n in t.shape] for t in gguf.GGUFReader(base).tensors}
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(path, "hy_v4")
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(RANK))
    for name in TARGETS:
        n_in, n_out = shapes[name]  # GGUF order: ne0 = input width
        a = rng.normal(0, 1 / np.sqrt(n_in), (RANK, n_in)).astype(np.float32)
        b = rng.normal(0, 1 / np.sqrt(RANK), (n_out, RANK)).astype(np.float32)
        w.add_tensor(f"{name}.lora_a", a)
        w.add_tensor(f"{name}.lora_b", b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


fixture = json.load(open(os.path.splitext(BASE)[0] + ".json"))
write_adapter(BASE, ADAPTER)
with tempfile.TemporaryDirectory() as tmp:
    copy = os.path.join(tmp, "f32.gguf")
    float32_copy(BASE, copy)
    prompt_ids = fixture["sequence"][:PROMPT_LEN]
    plain = open_llama(copy, kv_f32=True)
    plain_last = np.array(positions(plain, prompt_ids, TOP, FIXED_IDS)[-1]["fixed_logits"])
    del plain
    llm = open_llama(copy, kv_f32=True, lora_path=ADAPTER)
    tokens, margins = greedy(llm, prompt_ids, N_PREDICT)
    sequence = prompt_ids + tokens
    per_position = positions(llm, sequence, TOP, FIXED_IDS)
    moved = float(np.abs(np.array(per_position[PROMPT_LEN - 1]["fixed_logits"]) - plain_last).max())
    assert moved > 0.1, f"llama.cpp did not apply the adapter (last prompt logits moved {moved})"
    golden = {
        "base": os.path.basename(BASE),
        "adapter": os.path.basename(ADAPTER),
        "targets": TARGETS,
        "llama_cpp_python": llama_cpp.__version__,
        "config": "float32 copy of the base, f32 KV cache, lora_path with scale 1, n_ctx 512, "
                  "2 threads, no flash attention",
        "adapter_moves_last_prompt_logits_by": round(moved, 4),
        "prompt_ids": prompt_ids,
        "greedy": tokens,
        "margins": margins,
        "sequence": sequence,
        "fixed_ids": FIXED_IDS,
        "positions": per_position,
    }
    del llm

with open(OUT, "w") as f:
    json.dump(golden, f, indent=1)
print(f"{len(sequence)} positions; the adapter moves the last prompt logits by up to {moved:.3f}")
