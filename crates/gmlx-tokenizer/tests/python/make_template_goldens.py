#!/usr/bin/env python3
"""Render every chat template in llama.cpp's models/templates/ with Python jinja2 the
way Hugging Face transformers does, and write the results as goldens for
crates/gmlx-tokenizer/tests/templates.rs.

HF conventions reproduced here (transformers `_compile_jinja_template`):
  * ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
  * the `loopcontrols` extension and a `{% generation %}` block that renders its body
  * `raise_exception(msg)` raises a TemplateError
  * `tojson` is json.dumps(ensure_ascii=False, indent=..., separators=..., sort_keys=False)
  * `strftime_now(fmt)` formats "now"; here "now" is pinned to FIXED_NOW so goldens are stable
  * render(messages=..., tools=..., documents=None, add_generation_prompt=..., bos_token, eos_token, **kwargs)

Usage (once; the output is committed):
  GMLX_LLAMA_CPP=/path/to/vendor/llama.cpp python make_template_goldens.py > ../data/template_goldens.json

Pinned: jinja2==3.1.6 (xtask/python-requirements.txt).
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from template_cases import BOS_TOKEN, CASES, EOS_TOKEN, FIXED_NOW  # noqa: E402


class GenerationTracker(Extension):
    """`{% generation %}...{% endgeneration %}` renders its body unchanged (HF's AssistantTracker)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime(*FIXED_NOW).strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTracker, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    root = os.environ.get(
        "GMLX_LLAMA_CPP",
        os.path.expanduser("~/.cache/gmlx/llama-cpp-python-0.3.36/vendor/llama.cpp"),
    )
    tdir = os.path.join(root, "models", "templates")
    env = make_env()
    out = {}
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            source = f.read()
        results = {}
        try:
            template = env.from_string(source)
        except Exception as e:  # a template jinja2 cannot parse
            out[name] = {"parse_error": f"{type(e).__name__}: {e}"}
            continue
        for case in CASES:
            ctx = {
                "messages": case["messages"],
                "tools": case.get("tools"),
                "documents": None,
                "add_generation_prompt": case["add_generation_prompt"],
                "bos_token": BOS_TOKEN,
                "eos_token": EOS_TOKEN,
            }
            ctx.update(case.get("kwargs", {}))
            try:
                results[case["name"]] = {"ok": template.render(**ctx)}
            except jinja2.exceptions.TemplateError as e:
                results[case["name"]] = {"error": f"{type(e).__name__}: {e}"}
            except Exception as e:
                results[case["name"]] = {"error": f"{type(e).__name__}: {e}"}
        out[name] = results
    meta = {
        "jinja2": jinja2.__version__,
        "python": sys.version.split()[0],
        "source": "llama-cpp-python-0.3.36/vendor/llama.cpp/models/templates",
    }
    json.dump({"meta": meta, "templates": out}, sys.stdout, ensure_ascii=False, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
