"""Random-weight GGUFs shaped like real models, for speed measurements only (the outputs are
meaningless). Matrices are random Q4_K blocks (the output head Q6_K, or the token embedding
where the shape ties them) with small block scales;
norms are 1, the DeltaNet's decay parameters fixed and stable.

    random_gguf.py SHAPE OUT.gguf --vocab-from TOKENIZER.gguf

SHAPE is one of SHAPES below. The tokenizer keys are copied from TOKENIZER.gguf (any
byte-level BPE GGUF); when the shape's vocabulary is larger, unused placeholder tokens pad it,
so the embedding and output head have the real model's size.

Needs gguf-py (llama.cpp's, on PYTHONPATH) and numpy.
"""
import argparse
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q

# Qwen3.5-9B (Qwen/Qwen3.5-9B config.json): 32 blocks, a full-attention block every 4th.
SHAPES = {
    "qwen35-9b": dict(
        arch="qwen35", hidden=4096, blocks=32, interval=4, ffn=12288, vocab=248320,
        heads=16, kv_heads=4, head_dim=256, rope_dims=64, sections=[11, 11, 10, 0],
        k_heads=16, v_heads=32, k_dim=128, v_dim=128, conv=4, context=262144,
    ),
}

# A small MoE (qwen3moe) whose routed experts (64 per layer, 8 used) are most of its bytes: the
# expert-streaming benchmark runs it with an arena of a fraction of them.
SHAPES["qwen3moe-stream"] = dict(
    arch="qwen3moe", hidden=1024, blocks=8, heads=16, kv_heads=4, head_dim=64, vocab=32000,
    experts=64, experts_used=8, expert_ffn=512, context=4096,
)

# Llama-3-8B (meta-llama/Meta-Llama-3-8B config.json), for the GPU benchmark's codecs.
SHAPES["llama3-8b"] = dict(
    arch="llama", hidden=4096, blocks=32, heads=32, kv_heads=8, ffn=14336, vocab=128256,
    context=16384,
)

# SmolLM2-135M (HuggingFaceTB/SmolLM2-135M config.json): the small, latency-bound decode of the
# GPU benchmark; the output head is the token embedding (tied), as in the real file.
SHAPES["smollm2-135m"] = dict(
    arch="llama", hidden=576, blocks=30, heads=9, kv_heads=3, ffn=1536, vocab=49152,
    context=8192, rope_base=100_000.0, tied=True,
)

SCALE = 0.0004  # block scale (f16): keeps random activations finite through 32 blocks


class Writer:
    def __init__(self, out: str, arch: str, seed: int = 0):
        self.w = gguf.GGUFWriter(out, arch)
        self.rng = np.random.default_rng(seed)

    def quantized(self, name: str, rows: int, cols: int, qtype=Q.Q4_K) -> None:
        """A [rows, cols] matrix (GGUF dims [cols, rows]) of random blocks."""
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        if cols % block:
            raise SystemExit(f"{name}: {cols} columns are not a multiple of {block}")
        raw = self.rng.integers(0, 256, size=(rows * (cols // block), size), dtype=np.uint8)
        # the block scale d (f16) where each type keeps it, smaller where the codes are wider
        at, d = {
            Q.Q4_0: (0, SCALE), Q.Q4_K: (0, SCALE), Q.Q8_0: (0, SCALE / 16),
            Q.Q6_K: (size - 2, SCALE), Q.IQ4_XS: (0, SCALE / 128),
        }.get(qtype, (None, None))
        if at is None:
            raise SystemExit(f"unsupported type {qtype.name}")
        raw[:, at:at + 2] = np.frombuffer(np.float16(d).tobytes(), dtype=np.uint8)
        if qtype == Q.Q4_K:  # d, then dmin
            raw[:, 2:4] = raw[:, 0:2]
        self.w.add_tensor(name, raw.reshape(rows, -1), raw_shape=(rows, cols // block * size),
                          raw_dtype=qtype)

    def experts(self, name: str, experts: int, rows: int, cols: int) -> None:
        """A stack of `experts` random Q4_K [rows, cols] matrices (GGUF dims [cols, rows, experts])."""
        block, size = gguf.GGML_QUANT_SIZES[Q.Q4_K]
        raw = self.rng.integers(0, 256, size=(experts * rows * (cols // block), size), dtype=np.uint8)
        scale = np.frombuffer(np.float16(SCALE).tobytes(), dtype=np.uint8)
        raw[:, 0:2] = scale
        raw[:, 2:4] = scale
        self.w.add_tensor(name, raw.reshape(experts, rows, -1),
                          raw_shape=(experts, rows, cols // block * size), raw_dtype=Q.Q4_K)

    def vector(self, name: str, values) -> None:
        self.w.add_tensor(name, np.asarray(values, dtype=np.float32))

    def close(self) -> None:
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()


def copy_tokenizer(w: gguf.GGUFWriter, source: str, vocab: int) -> None:
    reader = gguf.GGUFReader(source)
    fields = {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    tokens = list(fields["tokenizer.ggml.tokens"])
    if len(tokens) > vocab:
        raise SystemExit(f"{source} has {len(tokens)} tokens, more than the shape's {vocab}")
    pad = vocab - len(tokens)
    fields["tokenizer.ggml.tokens"] = tokens + [f"<|unused_{i}|>" for i in range(pad)]
    if "tokenizer.ggml.token_type" in fields:
        # 5 = unused
        fields["tokenizer.ggml.token_type"] = [int(t) for t in fields["tokenizer.ggml.token_type"]] + [5] * pad
    if "tokenizer.ggml.scores" in fields:
        fields["tokenizer.ggml.scores"] = [float(s) for s in fields["tokenizer.ggml.scores"]] + [0.0] * pad
    for key, value in fields.items():
        if key == "tokenizer.chat_template":
            continue
        if isinstance(value, list):
            w.add_array(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)


def qwen35(out: str, vocab_from: str, s: dict) -> None:
    g = Writer(out, s["arch"])
    w = g.w
    arch = s["arch"]
    H, L = s["hidden"], s["blocks"]
    recurrent = [(i + 1) % s["interval"] != 0 for i in range(L)]
    w.add_block_count(L)
    w.add_context_length(s["context"])
    w.add_embedding_length(H)
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_freq_base(10_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(s["rope_dims"])
    w.add_rope_dimension_sections(s["sections"])
    w.add_vocab_size(s["vocab"])
    w.add_uint32(f"{arch}.ssm.conv_kernel", s["conv"])
    w.add_uint32(f"{arch}.ssm.state_size", s["k_dim"])
    w.add_uint32(f"{arch}.ssm.group_count", s["k_heads"])
    w.add_uint32(f"{arch}.ssm.time_step_rank", s["v_heads"])
    w.add_uint32(f"{arch}.ssm.inner_size", s["v_heads"] * s["v_dim"])
    w.add_uint32(f"{arch}.full_attention_interval", s["interval"])
    w.add_array(f"{arch}.attention.recurrent_layers", recurrent)
    copy_tokenizer(w, vocab_from, s["vocab"])

    g.quantized("token_embd.weight", s["vocab"], H)
    g.vector("output_norm.weight", np.ones(H))
    g.quantized("output.weight", s["vocab"], H, Q.Q6_K)
    channels = 2 * s["k_heads"] * s["k_dim"] + s["v_heads"] * s["v_dim"]
    values = s["v_heads"] * s["v_dim"]
    q_width = s["heads"] * s["head_dim"]
    for i in range(L):
        b = f"blk.{i}"
        g.vector(f"{b}.attn_norm.weight", np.ones(H))
        g.vector(f"{b}.post_attention_norm.weight", np.ones(H))
        if recurrent[i]:
            g.quantized(f"{b}.attn_qkv.weight", channels, H)
            g.quantized(f"{b}.attn_gate.weight", values, H)
            g.quantized(f"{b}.ssm_alpha.weight", s["v_heads"], H)
            g.quantized(f"{b}.ssm_beta.weight", s["v_heads"], H)
            w.add_tensor(f"{b}.ssm_conv1d.weight",
                         g.rng.normal(0, 0.5, size=(channels, s["conv"])).astype(np.float32))
            g.vector(f"{b}.ssm_a", -np.ones(s["v_heads"]))
            g.vector(f"{b}.ssm_dt.bias", np.zeros(s["v_heads"]))
            g.vector(f"{b}.ssm_norm.weight", np.ones(s["v_dim"]))
            g.quantized(f"{b}.ssm_out.weight", H, values)
        else:
            g.quantized(f"{b}.attn_q.weight", 2 * q_width, H)
            g.quantized(f"{b}.attn_k.weight", s["kv_heads"] * s["head_dim"], H)
            g.quantized(f"{b}.attn_v.weight", s["kv_heads"] * s["head_dim"], H)
            g.quantized(f"{b}.attn_output.weight", H, q_width)
            g.vector(f"{b}.attn_q_norm.weight", np.ones(s["head_dim"]))
            g.vector(f"{b}.attn_k_norm.weight", np.ones(s["head_dim"]))
        g.quantized(f"{b}.ffn_gate.weight", s["ffn"], H)
        g.quantized(f"{b}.ffn_up.weight", s["ffn"], H)
        g.quantized(f"{b}.ffn_down.weight", H, s["ffn"])
    g.close()


def qwen3moe(out: str, vocab_from: str, s: dict) -> None:
    g = Writer(out, s["arch"])
    w = g.w
    H, L, E = s["hidden"], s["blocks"], s["experts"]
    w.add_block_count(L)
    w.add_context_length(s["context"])
    w.add_embedding_length(H)
    w.add_feed_forward_length(s["expert_ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(E)
    w.add_expert_used_count(s["experts_used"])
    w.add_expert_feed_forward_length(s["expert_ffn"])
    w.add_vocab_size(s["vocab"])
    copy_tokenizer(w, vocab_from, s["vocab"])
    # zero-mean float16 embeddings: random Q4_K blocks share a mean that would make every
    # token route alike
    w.add_tensor("token_embd.weight",
                 g.rng.normal(0, 1.0, size=(s["vocab"], H)).astype(np.float16))
    g.vector("output_norm.weight", np.ones(H))
    g.quantized("output.weight", s["vocab"], H, Q.Q6_K)
    q_width = s["heads"] * s["head_dim"]
    kv_width = s["kv_heads"] * s["head_dim"]
    for i in range(L):
        b = f"blk.{i}"
        g.vector(f"{b}.attn_norm.weight", np.ones(H))
        g.quantized(f"{b}.attn_q.weight", q_width, H)
        g.quantized(f"{b}.attn_k.weight", kv_width, H)
        g.quantized(f"{b}.attn_v.weight", kv_width, H)
        g.quantized(f"{b}.attn_output.weight", H, q_width)
        g.vector(f"{b}.attn_q_norm.weight", np.ones(s["head_dim"]))
        g.vector(f"{b}.attn_k_norm.weight", np.ones(s["head_dim"]))
        g.vector(f"{b}.ffn_norm.weight", np.ones(H))
        # a router with spread-out logits, so different tokens pick different experts
        w.add_tensor(f"{b}.ffn_gate_inp.weight",
                     g.rng.normal(0, 1.0, size=(E, H)).astype(np.float32))
        g.experts(f"{b}.ffn_gate_exps.weight", E, s["expert_ffn"], H)
        g.experts(f"{b}.ffn_up_exps.weight", E, s["expert_ffn"], H)
        g.experts(f"{b}.ffn_down_exps.weight", E, H, s["expert_ffn"])
    g.close()


def llama(out: str, vocab_from: str, s: dict, qtype) -> None:
    g = Writer(out, s["arch"])
    w = g.w
    H, L = s["hidden"], s["blocks"]
    head_dim = H // s["heads"]
    w.add_block_count(L)
    w.add_context_length(s["context"])
    w.add_embedding_length(H)
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_freq_base(s.get("rope_base", 500_000.0))
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(s["vocab"])
    copy_tokenizer(w, vocab_from, s["vocab"])
    g.quantized("token_embd.weight", s["vocab"], H, qtype)
    g.vector("output_norm.weight", np.ones(H))
    if not s.get("tied"):
        g.quantized("output.weight", s["vocab"], H, Q.Q6_K)
    kv_width = s["kv_heads"] * head_dim
    for i in range(L):
        b = f"blk.{i}"
        g.vector(f"{b}.attn_norm.weight", np.ones(H))
        g.quantized(f"{b}.attn_q.weight", H, H, qtype)
        g.quantized(f"{b}.attn_k.weight", kv_width, H, qtype)
        g.quantized(f"{b}.attn_v.weight", kv_width, H, qtype)
        g.quantized(f"{b}.attn_output.weight", H, H, qtype)
        g.vector(f"{b}.ffn_norm.weight", np.ones(H))
        g.quantized(f"{b}.ffn_gate.weight", s["ffn"], H, qtype)
        g.quantized(f"{b}.ffn_up.weight", s["ffn"], H, qtype)
        g.quantized(f"{b}.ffn_down.weight", H, s["ffn"], qtype)
    g.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out")
    ap.add_argument("--vocab-from", required=True, help="a GGUF whose tokenizer keys are copied")
    ap.add_argument("--type", default="Q4_K", help="the matrices' type (llama shapes only)")
    args = ap.parse_args()
    shape = SHAPES[args.shape]
    if shape["arch"] == "llama":
        llama(args.out, args.vocab_from, shape, Q[args.type])
    else:
        build = {"qwen35": qwen35, "qwen3moe": qwen3moe}[shape["arch"]]
        build(args.out, args.vocab_from, shape)
    print(f"wrote {args.out} ({args.shape})", file=sys.stderr)


if __name__ == "__main__":
    main()
