"""How many of llama.cpp's greedy tokens a `gmlx run --raw` output reproduces, for the default
model's golden (crates/gmlx-models/tests/goldens/smollm2_q4_1.json: its quantized reference,
llama.cpp's CPU products with 8-bit activations, and its exact float32 one). The golden holds
token ids; their texts come from the model's own vocabulary (byte-level BPE), so an output
agrees on token i where the text of tokens 0..i is a prefix of it. For the first token that
disagrees it prints the golden's margin there (its top logit minus the runner-up: a small one is
a near tie that any rounding may flip).

    python3 parity_text.py GOLDEN.json MODEL.gguf OUTPUT.txt...

Needs gguf-py (the llama.cpp sources' `gguf-py` on PYTHONPATH, or the PyPI `gguf` package).
"""
import json
import sys

import gguf


def byte_decoder():
    """GPT-2's map from the printable characters of byte-level BPE back to bytes."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def token_bytes(model):
    """Each token's text as detokenizing prints it: control tokens (an end of text) print none."""
    reader = gguf.GGUFReader(model)
    field = reader.fields["tokenizer.ggml.tokens"]
    types = reader.fields["tokenizer.ggml.token_type"]
    decode = byte_decoder()
    control = int(gguf.TokenType.CONTROL)
    return [b"" if int(types.parts[t][0]) == control
            else bytes(decode.get(ch, ord("?")) for ch in bytes(field.parts[i]).decode("utf-8"))
            for i, t in zip(field.data, types.data)]


def agreement(output, ids, pieces):
    """Golden tokens whose text, with all before, begins `output`."""
    text = b""
    for i, t in enumerate(ids):
        text += pieces[t]
        if not output.startswith(text):
            return i
    return len(ids)


def main():
    golden = json.load(open(sys.argv[1]))
    pieces = token_bytes(sys.argv[2])
    for path in sys.argv[3:]:
        output = open(path, "rb").read()
        parts = []
        for name in ("quantized", "exact"):
            ref = golden[name]
            n = agreement(output, ref["greedy"], pieces)
            note = ("all" if n == len(ref["greedy"])
                    else f"margin {ref['margins'][n]:.3f} at the first that differs")
            parts.append(f"{name} {n} of {len(ref['greedy'])} ({note})")
        print(f"{path}: {'; '.join(parts)}")


if __name__ == "__main__":
    main()
