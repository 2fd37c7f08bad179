"""Tool calling and n > 1 through the official openai client. For each model (one per
tool-call format: SmolLM2 with the tools injected in the system prompt, and the qwen3next,
qwen35 and gpt-oss fixtures with their families' templates): forced calls (a named function,
`required` among two) are well-formed and their arguments validate against the tool's schema
(jsonschema), streamed calls equal whole ones, `auto` replies are consistent, `none` gives no
calls, a history with calls and results renders, bad tools are 400s naming their part. Then
n > 1 on SmolLM2: choice i equals a single request seeded seed + i, streamed or not.
Usage: tools.py BASE_URL MODEL_ID..."""
import json
import sys

import jsonschema
import openai

base, models = sys.argv[1], sys.argv[2:]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused")

weather = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
clock = {
    "type": "object",
    "properties": {"zone": {"enum": ["UTC", "CET", "JST"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
schemas = {"get_weather": weather, "get_time": clock}
tools = [
    {"type": "function", "function": {"name": n, "description": f"{n} of a place", "parameters": s}}
    for n, s in schemas.items()
]
messages = [{"role": "user", "content": "What is the weather in Paris for two days?"}]


def check_calls(reply, names, where):
    choice = reply.choices[0]
    calls = choice.message.tool_calls
    assert calls, (where, choice)
    assert choice.finish_reason == "tool_calls", (where, choice.finish_reason)
    assert choice.message.content is None, (where, choice.message.content)
    for call in calls:
        assert call.type == "function" and call.id, (where, call)
        assert call.function.name in names, (where, call.function.name)
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
    return [(c.function.name, json.loads(c.function.arguments)) for c in calls]


def streamed_calls(model, **kw):
    calls, finish = {}, None
    for chunk in client.chat.completions.create(model=model, stream=True, **kw):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for c in delta.tool_calls or []:
            calls[c.index] = (c.function.name, json.loads(c.function.arguments))
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls", (model, finish)
    return [calls[i] for i in sorted(calls)]


def expect_400(param, word, **kw):
    try:
        client.chat.completions.create(model=models[0], messages=messages, max_tokens=4, **kw)
    except openai.BadRequestError as e:
        body = e.body or {}
        assert body.get("param") == param, (param, body)
        assert word in body.get("message", ""), (word, body)
        return
    raise AssertionError(f"no 400 for {param}")


for model in models:
    # room for the most whitespace and digits the grammar lets a random fixture write
    common = dict(model=model, messages=messages, tools=tools, max_tokens=400)
    named = {"type": "function", "function": {"name": "get_weather"}}
    for seed in range(4):
        r = client.chat.completions.create(tool_choice=named, temperature=1.0, seed=seed, **common)
        check_calls(r, ["get_weather"], (model, "named", seed))
        r = client.chat.completions.create(
            tool_choice="required", temperature=1.0, seed=seed, **common
        )
        check_calls(r, list(schemas), (model, "required", seed))
    whole = check_calls(
        client.chat.completions.create(tool_choice="required", temperature=0, **common),
        list(schemas), (model, "greedy"),
    )
    assert streamed_calls(tool_choice="required", temperature=0, **common) == whole, model
    # auto: a call or an answer, never a finish reason that disagrees
    r = client.chat.completions.create(tool_choice="auto", temperature=0, **common)
    c = r.choices[0]
    if c.message.tool_calls:
        assert c.finish_reason == "tool_calls", c
        for call in c.message.tool_calls:
            assert call.function.name in schemas, call
    else:
        assert isinstance(c.message.content, str) and c.finish_reason in ("stop", "length"), c
    r = client.chat.completions.create(tool_choice="none", temperature=0, **common)
    assert not r.choices[0].message.tool_calls and r.choices[0].finish_reason != "tool_calls"
    history = messages + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"forecast": "sun"}'},
    ]
    r = client.chat.completions.create(
        model=model, messages=history, tools=tools, max_tokens=8, temperature=0
    )
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls"), r
    print(f"tools {model}: ok ({whole[0][0]})")

expect_400("tool_choice.function.name", "not among",
           tools=tools, tool_choice={"type": "function", "function": {"name": "nope"}})
expect_400("tool_choice", "needs `tools`", tool_choice="required")
expect_400("tools[0].function.name", "letters", tools=[{"type": "function", "function": {"name": "a b"}}])
patterned = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^a"}}}
expect_400("tools[0].function.parameters", "pattern", tools=[{"type": "function", "function": {"name": "f", "parameters": patterned}}],
           tool_choice="required")
expect_400("n", "batch width", n=1000)

# n > 1: choice i is the request seeded seed + i, whole or streamed
smol = models[0]
ask = dict(model=smol, messages=[{"role": "user", "content": "Tell me a story."}],
           max_tokens=12, temperature=1.0)
r = client.chat.completions.create(n=3, seed=7, **ask)
assert [c.index for c in r.choices] == [0, 1, 2], r
texts = [c.message.content for c in r.choices]
solo_tokens = 0
for i in range(3):
    solo = client.chat.completions.create(seed=7 + i, **ask)
    assert texts[i] == solo.choices[0].message.content, (i, texts[i], solo)
    solo_tokens += solo.usage.completion_tokens
assert r.usage.completion_tokens == solo_tokens, (r.usage, solo_tokens)
assert r.usage.prompt_tokens == solo.usage.prompt_tokens, (r.usage, solo.usage)
assert len(set(texts)) > 1, texts
parts = ["", "", ""]
for chunk in client.chat.completions.create(n=3, seed=7, stream=True, **ask):
    for c in chunk.choices:
        parts[c.index] += c.delta.content or ""
assert parts == texts, (parts, texts)
done = client.completions.create(model=smol, prompt="Once upon a time", n=2, seed=3,
                                 max_tokens=10, temperature=1.0)
assert [c.index for c in done.choices] == [0, 1], done
solo = client.completions.create(model=smol, prompt="Once upon a time", seed=4,
                                 max_tokens=10, temperature=1.0)
assert done.choices[1].text == solo.choices[0].text, (done.choices[1].text, solo.choices[0].text)
print("n > 1: ok")
print("tools client: ok")
