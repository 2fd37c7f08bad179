#!/usr/bin/env python3
"""Reference implementation of gmlx's vocab_map_hash (v1) for GGUF vocabularies, to
show the algorithm in docs/tokenizer.md is reproducible outside Rust.

  python vocab_map_hash.py path/to/model.gguf

token_bytes(id), as in gmlx-tokenizer (llama.cpp's token_to_piece with specials shown):
  control / unknown / user-defined tokens: their text (UTF-8)
  normal tokens: SentencePiece and Gemma 4 -> text with U+2581 replaced by a space;
                 byte-level BPE (gpt2) -> GPT-2 byte-level characters mapped back to bytes
  byte tokens <0xNN>: the byte
  unused / undefined tokens: nothing
hash = SHA-256("gmlx-vocab-map-v1\\n" || u64le(N) || for each id: u64le(len) || bytes), hex.
Empty token texts are "[EMPTY_<id>]" (llama.cpp). llama.cpp's adjustments of token types
(EOG texts become control, gpt-oss channel markers user-defined, ...) are not repeated
here; they do not change the bytes of a normal vocabulary.
"""
import hashlib
import struct
import sys

import gguf


def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_bytes(model, text, ttype, dec):
    if ttype in (2, 3, 4):
        return text.encode("utf-8")
    if ttype == 1:
        if model in ("llama", "gemma4"):
            return text.replace("\u2581", " ").encode("utf-8")
        return b"".join(bytes([dec[c]]) if c in dec else c.encode("utf-8") for c in text)
    if ttype == 6:
        if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            return bytes([int(text[3:5], 16)])
        return b"".join(bytes([dec[c]]) if c in dec else c.encode("utf-8") for c in text)
    return b""


def main(path):
    r = gguf.GGUFReader(path)
    model = r.fields["tokenizer.ggml.model"].contents()
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents() if "tokenizer.ggml.token_type" in r.fields else [1] * len(toks)
    dec = byte_decoder()
    h = hashlib.sha256(b"gmlx-vocab-map-v1\n")
    h.update(struct.pack("<Q", len(toks)))
    for i, (t, ty) in enumerate(zip(toks, types)):
        b = token_bytes(model, t or f"[EMPTY_{i}]", ty, dec)
        h.update(struct.pack("<Q", len(b)))
        h.update(b)
    print(h.hexdigest())


if __name__ == "__main__":
    main(sys.argv[1])
