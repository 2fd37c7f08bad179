"""The conversations rendered by make_template_goldens.py. The Rust test reads the same
cases from tests/data/template_cases.json, written by `python template_cases.py`."""
import json

BOS_TOKEN = "<|bos|>"
EOS_TOKEN = "<|eos|>"
# strftime_now() returns this moment (year, month, day, hour, minute, second).
FIXED_NOW = (2026, 1, 15, 12, 34, 56)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}

CASES = [
    {
        "name": "system_multi_turn",
        "add_generation_prompt": True,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Hello! How are you?"},
            {"role": "assistant", "content": "I'm fine, thanks. How can I help?"},
            {"role": "user", "content": "What is 2+2?"},
        ],
    },
    {
        "name": "single_user",
        "add_generation_prompt": True,
        "messages": [{"role": "user", "content": "Hi there"}],
    },
    {
        "name": "no_generation_prompt",
        "add_generation_prompt": False,
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! What can I do for you today?"},
        ],
    },
    {
        "name": "tool_call",
        "add_generation_prompt": True,
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "What's the weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call12345",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temperature\": 22}"},
        ],
    },
    {
        "name": "tool_call_string_arguments",
        "add_generation_prompt": False,
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "user", "content": "Weather in Oslo, in fahrenheit?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call67890",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"location\": \"Oslo\", \"unit\": \"fahrenheit\"}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call67890", "name": "get_weather", "content": "{\"temperature\": 41}"},
            {"role": "assistant", "content": "It is 41°F in Oslo."},
        ],
    },
    {
        "name": "thinking_disabled",
        "add_generation_prompt": True,
        "kwargs": {"enable_thinking": False},
        "messages": [{"role": "user", "content": "Solve x + 1 = 2."}],
    },
    {
        "name": "reasoning_content",
        "add_generation_prompt": True,
        "messages": [
            {"role": "user", "content": "Is 7 prime?"},
            {"role": "assistant", "reasoning_content": "7 has no divisors but 1 and 7.", "content": "Yes."},
            {"role": "user", "content": "And 9?"},
        ],
    },
    {
        "name": "unicode_multiline",
        "add_generation_prompt": True,
        "messages": [
            {"role": "system", "content": "  Réponds en français.  \n"},
            {"role": "user", "content": "Line 1\n  Line 2 — ünïcödé 🦙 <tag> & \"quotes\" 'single'\n\n"},
        ],
    },
]

if __name__ == "__main__":
    print(json.dumps({"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN, "fixed_now": FIXED_NOW, "cases": CASES},
                     ensure_ascii=False, indent=1))
