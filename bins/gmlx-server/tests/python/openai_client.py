"""Drives gmlx-server with the official openai client: models, chat (plain and streamed),
completions. Usage: openai_client.py BASE_URL MODEL_ID"""
import sys

import openai

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused")

ids = [m.id for m in client.models.list().data]
assert model in ids, ids

chat = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Say hello."}],
    max_tokens=8,
    temperature=0,
)
choice = chat.choices[0]
assert choice.message.role == "assistant"
assert choice.message.content, chat
assert choice.finish_reason in ("stop", "length"), choice.finish_reason
assert chat.usage.completion_tokens <= 8 and chat.usage.prompt_tokens > 0, chat.usage
assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens

stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Say hello."}],
    max_tokens=8,
    temperature=0,
    stream=True,
    stream_options={"include_usage": True},
)
pieces, finish, usage = [], None, None
for chunk in stream:
    if chunk.usage:
        usage = chunk.usage
    for c in chunk.choices:
        if c.delta.content:
            pieces.append(c.delta.content)
        if c.finish_reason:
            finish = c.finish_reason
assert "".join(pieces) == choice.message.content, (pieces, choice.message.content)
assert finish == choice.finish_reason and usage.completion_tokens == chat.usage.completion_tokens

lp = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Say hello."}],
    max_tokens=3,
    temperature=0,
    logprobs=True,
    top_logprobs=2,
)
entries = lp.choices[0].logprobs.content
assert len(entries) == 3 and all(len(e.top_logprobs) == 2 for e in entries), entries
assert all(e.logprob <= 0 for e in entries)

comp = client.completions.create(
    model=model, prompt="The capital of France is", max_tokens=6, temperature=0, stop=["\n"]
)
assert comp.choices[0].text.strip(), comp
assert "\n" not in comp.choices[0].text
assert comp.choices[0].finish_reason in ("stop", "length")

seeded = [
    client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Name a fruit."}],
        max_tokens=6,
        temperature=1.0,
        seed=7,
    ).choices[0].message.content
    for _ in range(2)
]
assert seeded[0] == seeded[1], seeded

try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    raise AssertionError("an unknown model was accepted")
except openai.NotFoundError as e:
    assert e.status_code == 404

print("openai client: ok")
