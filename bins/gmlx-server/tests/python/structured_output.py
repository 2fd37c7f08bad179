"""response_format through the official openai client: 50 replies sampled at temperature 1
against a strict json_schema all parse and validate (chat, streamed and not, and
completions); json_object replies parse; an unenforceable schema is a 400 naming its
keyword. Usage: structured_output.py BASE_URL MODEL_ID"""
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused")

schema = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 8},
        "country": {"enum": ["France", "Spain", "Italy", "other"]},
        "population": {"type": "integer"},
        "capital": {"type": "boolean"},
        "rivers": {
            "type": "array",
            "items": {"type": "string", "maxLength": 6},
            "maxItems": 2,
        },
        "mayor": {"anyOf": [{"type": "string", "maxLength": 6}, {"type": "null"}]},
    },
    "required": ["city", "country", "population", "capital", "rivers", "mayor"],
    "additionalProperties": False,
}
fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}}
messages = [{"role": "user", "content": "Describe Paris as JSON."}]

def check(text, where):
    value = json.loads(text)
    jsonschema.validate(value, schema)
    return value

def chat_reply(seed):
    # every fourth with top_p, which masks every step (no unconstrained first draw)
    top_p = 0.95 if seed % 4 == 0 else 1.0
    r = client.chat.completions.create(
        model=model, messages=messages, max_tokens=160, temperature=1.0, seed=seed,
        top_p=top_p, response_format=fmt,
    )
    assert r.choices[0].finish_reason == "stop", (seed, r.choices[0])
    return r.choices[0].message.content

def streamed_reply(seed):
    parts, finish = [], None
    for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=160, temperature=1.0, seed=seed,
        response_format=fmt, stream=True,
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert finish == "stop", (seed, finish, parts)
    return "".join(parts)

def completion_reply(seed):
    r = client.completions.create(
        model=model, prompt="Paris, as JSON:", max_tokens=160, temperature=1.0,
        seed=seed, extra_body={"response_format": fmt},
    )
    assert r.choices[0].finish_reason == "stop", (seed, r.choices[0])
    return r.choices[0].text

jobs = ([(chat_reply, s) for s in range(40)] + [(streamed_reply, 100 + s) for s in range(5)]
        + [(completion_reply, 200 + s) for s in range(5)])
with ThreadPoolExecutor(8) as pool:
    texts = list(pool.map(lambda job: job[0](job[1]), jobs))
replies = 0
for (kind, seed), text in zip(jobs, texts):
    check(text, f"{kind.__name__} seed {seed}")
    replies += 1
assert replies == 50

# json_object: any object; greedy and seeded replies that end parse as objects
ended = 0
for seed in range(6):
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Give me a JSON object."}],
        max_tokens=120, temperature=0.7, seed=seed, response_format={"type": "json_object"},
    )
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict), r
        ended += 1
    else:
        assert r.choices[0].message.content.lstrip().startswith("{"), r
assert ended >= 1, "no json_object reply ended within 120 tokens"

# what the engine cannot enforce is refused by name
for bad, keyword in [({"type": "string", "pattern": "^a"}, "pattern"),
                     ({"type": "integer", "minimum": 0}, "minimum")]:
    try:
        client.chat.completions.create(
            model=model, messages=messages, max_tokens=8,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": bad}},
        )
        raise AssertionError(f"{keyword} was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400
        assert keyword in e.body["message"], e.body
        assert e.body["param"] == "response_format.json_schema.schema", e.body
print("structured output: ok", replies, "replies valid;", ended, "json_object replies ended")
