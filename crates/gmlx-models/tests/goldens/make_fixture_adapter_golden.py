"""llama.cpp goldens for LoRA adapters on the certified fixtures (tests/fixtures/<arch>).

For one architecture's F16 fixture: every block projection gmlx adapts (`CANDIDATES`) gets a
random rank-4 adapter (seed 7, alpha 4 so the scale is 1) in llama.cpp's adapter format; a
projection is kept when llama.cpp, loading an adapter on it alone, changes its logits (its
graph multiplies it with `build_lora_mm`), and recorded as not adapted by llama.cpp otherwise.
llama.cpp then runs a float32 copy of the fixture (f32 KV cache) with the adapter on every
kept projection: logits at every position of the fixture's prompt plus llama.cpp's own 8
greedy tokens (top-16 ids and 32 fixed ids per position). The Rust test
(`tests/adapter_targets.rs`) applies the same adapter in gmlx and must agree within 1e-3.

Writes tests/goldens/<arch>-lora.gguf and <arch>-lora.json. Environment as for
make_smollm2_golden.py. Usage: make_fixture_adapter_golden.py ARCH [ARCH...]
"""
import json
import os
import sys
import tempfile

import gguf
import llama_cpp
import numpy as np

from reference import float32_copy, greedy, open_llama, positions

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "..", "..", "tests", "fixtures")
RANK = 4
N_PREDICT = 8
TOP = 16
# the block projections gmlx exposes as adapter targets (`blk.N.<slot>.weight`)
CANDIDATES = {
    "attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv", "attn_gate", "ssm_out",
    "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp",
    "attn_q_a", "attn_q_b", "attn_kv_a_mqa",
    "indexer.attn_q_b", "indexer.attn_k", "indexer.proj",
    "attn_kv", "attn_output_b", "attn_compressor_kv", "attn_compressor_gate",
    "indexer_compressor_kv", "indexer_compressor_gate",
}


def slot(name: str):
    parts = name.split(".")
    if len(parts) < 4 or parts[0] != "blk" or parts[-1] != "weight":
        return None
    return ".".join(parts[2:-1])


def write_adapter(arch: str, shapes: dict, targets: list, path: str) -> None:
    w = gguf.GGUFWriter(path, arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(RANK))
    for name in targets:
        rng = np.random.default_rng([7, sorted(shapes).index(name)])
        n_in, n_out = shapes[name]  # GGUF order: ne0 = input width
        a = rng.normal(0, 1 / np.sqrt(n_in), (RANK, n_in)).astype(np.float32)
        b = rng.normal(0, 1 / np.sqrt(RANK), (n_out, RANK)).astype(np.float32)
        w.add_tensor(f"{name}.lora_a", a)
        w.add_tensor(f"{name}.lora_b", b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def last_logits(model: str, ids: list, fixed: list, adapter=None) -> np.ndarray:
    extra = {"lora_path": adapter} if adapter else {}
    llm = open_llama(model, kv_f32=True, **extra)
    row = np.array(positions(llm, ids, 1, fixed)[-1]["fixed_logits"])
    del llm
    return row


def make(arch: str) -> None:
    base = os.path.join(FIXTURES, arch, f"{arch}-F16.gguf")
    fixture = json.load(open(os.path.join(FIXTURES, arch, f"{arch}-F16.json")))
    vocab = fixture["vocab_size"]
    fixed = sorted(np.random.default_rng(99).choice(vocab, 32, replace=False).tolist())
    shapes = {t.name: [int(n) for n in t.shape] for t in gguf.GGUFReader(base).tensors
              if slot(t.name) in CANDIDATES and len(t.shape) == 2}
    adapter = os.path.join(HERE, f"{arch}-lora.gguf")
    prompt_ids = fixture["sequence"][:fixture["prompt_len"]]
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "f32.gguf")
        float32_copy(base, copy)
        plain = last_logits(copy, prompt_ids, fixed)
        kept, ignored = [], []
        for name in sorted(shapes):
            one = os.path.join(tmp, "one.gguf")
            write_adapter(arch, shapes, [name], one)
            moved = np.abs(last_logits(copy, prompt_ids, fixed, one) - plain).max()
            (kept if moved > 1e-4 else ignored).append(name)
        write_adapter(arch, shapes, kept, adapter)
        llm = open_llama(copy, kv_f32=True, lora_path=adapter)
        tokens, margins = greedy(llm, prompt_ids, N_PREDICT)
        sequence = prompt_ids + tokens
        per_position = positions(llm, sequence, TOP, fixed)
        del llm
    moved = float(np.abs(np.array(per_position[len(prompt_ids) - 1]["fixed_logits"]) - plain).max())
    golden = {
        "base": os.path.basename(base),
        "adapter": os.path.basename(adapter),
        "targets": kept,
        "not_adapted_by_llama_cpp": ignored,
        "llama_cpp_python": llama_cpp.__version__,
        "config": "float32 copy of the base, f32 KV cache, lora_path with scale 1, n_ctx 512, "
                  "2 threads, no flash attention",
        "adapter_moves_last_prompt_logits_by": round(moved, 4),
        "prompt_ids": prompt_ids,
        "greedy": tokens,
        "margins": margins,
        "sequence": sequence,
        "fixed_ids": fixed,
        "positions": per_position,
    }
    with open(os.path.join(HERE, f"{arch}-lora.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print(f"{arch}: {len(kept)} targets adapted by llama.cpp, {len(ignored)} not "
          f"({sorted({slot(n) for n in ignored})}); {len(sequence)} positions; the adapter moves "
          f"the last prompt logits by up to {moved:.3f}")


for arch in sys.argv[1:]:
    make(arch)
