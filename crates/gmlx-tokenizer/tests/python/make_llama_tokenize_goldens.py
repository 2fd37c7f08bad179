#!/usr/bin/env python3
"""Token ids from llama.cpp's `llama-tokenize` for texts that exercise what the
vocab suite does not: special-token parsing (control and user-defined tokens written
in the text), BOS/EOS insertion and SentencePiece's space prefix after special tokens.

Run once; the output is committed as tests/data/llama_tokenize_goldens.json:

  LLAMA_TOKENIZE=~/.cache/gmlx/llama.cpp-build/bin/llama-tokenize \
  GMLX_LLAMA_CPP=~/.cache/gmlx/llama-cpp-python-0.3.36/vendor/llama.cpp \
  GMLX_SMOLLM2=~/.cache/gmlx/models/SmolLM2-135M-Instruct.Q4_1.gguf \
  python make_llama_tokenize_goldens.py > ../data/llama_tokenize_goldens.json

llama-tokenize is built from the llama-cpp-python 0.3.36 sdist's vendor/llama.cpp
(cmake -DCMAKE_BUILD_TYPE=Release, target llama-tokenize). Each case runs
`llama-tokenize -m VOCAB --stdin --ids --log-disable [--no-bos] [--no-parse-special]`;
without --no-bos llama.cpp adds BOS/EOS as the vocabulary asks (add_special = true).
"""
import datetime
import json
import os
import subprocess
import sys

import gguf

SUITE = [
    "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2", "llama-bpe",
    "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder",
]

GENERIC = [
    "Hello world",
    " Hello  world\n\n",
    "x",
    "\t indented\n  code();  ",
    "Grüße, 世界! 🦙 I'm here—aren't you?",
]


def special_texts(path):
    r = gguf.GGUFReader(path)
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    control = [t for t, ty in zip(toks, types) if ty == 3][:3]
    user = [t for t, ty in zip(toks, types) if ty == 4 and not t.startswith("[PAD")][:2]
    return control, user


def cases_for(path):
    control, user = special_texts(path)
    texts = list(GENERIC)
    marks = control + user
    for i, m in enumerate(marks):
        other = marks[(i + 1) % len(marks)]
        texts.append(f"{m}Hello {other} world{m}\n x")
        texts.append(f"  {m} after space")
    return texts


def tokenize(binary, model, text, add_special, parse_special):
    cmd = [binary, "-m", model, "--stdin", "--ids", "--log-disable"]
    if not add_special:
        cmd.append("--no-bos")
    if not parse_special:
        cmd.append("--no-parse-special")
    out = subprocess.run(cmd, input=text.encode("utf-8"), capture_output=True, check=True)
    line = out.stdout.decode("utf-8").strip().splitlines()[-1]
    return json.loads(line)


def main():
    binary = os.path.expanduser(os.environ.get("LLAMA_TOKENIZE", "~/.cache/gmlx/llama.cpp-build/bin/llama-tokenize"))
    root = os.path.expanduser(os.environ.get("GMLX_LLAMA_CPP", "~/.cache/gmlx/llama-cpp-python-0.3.36/vendor/llama.cpp"))
    smollm = os.path.expanduser(os.environ.get("GMLX_SMOLLM2", "~/.cache/gmlx/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    models = {f"ggml-vocab-{n}.gguf": os.path.join(root, "models", f"ggml-vocab-{n}.gguf") for n in SUITE}
    models["SmolLM2-135M-Instruct.Q4_1.gguf"] = smollm
    out = {}
    for name, path in models.items():
        rows = []
        for text in cases_for(path):
            for add_special in (False, True):
                for parse_special in (False, True):
                    rows.append({
                        "text": text,
                        "add_special": add_special,
                        "parse_special": parse_special,
                        "ids": tokenize(binary, path, text, add_special, parse_special),
                    })
        out[name] = rows
    meta = {
        "llama.cpp": "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp",
        "command": "llama-tokenize -m VOCAB --stdin --ids --log-disable [--no-bos] [--no-parse-special]",
        "date": datetime.date.today().isoformat(),
    }
    json.dump({"meta": meta, "vocabs": out}, sys.stdout, ensure_ascii=False, indent=0, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
