#!/usr/bin/env python3
"""Conversations for the chat-template cross-check (tests/ref/template-crosscheck.sh):
hand-written cases for each feature the real templates branch on (system
prompts, tools, assistant tool calls with string or object arguments, tool
results, reasoning content, <think> in content, content lists, generation
prompts, roles that make a template raise), then random mixtures of them.
    make-cases.py OUT.jsonl [N_RANDOM]"""
import json, random, sys

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                        "unit": {"type": "string", "enum": ["c", "f"]}},
                    "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web for \"anything\"",
     "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "k": {"type": "integer", "default": 5}}}}},
]

def call(name, args, as_string=True):
    return {"id": "call_%s" % name, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args) if as_string else args}}

TEXTS = ["Hi", "What is 2+2?", "  padded with spaces  ", "line one\nline two\n", "Ünïcödé ✓ 中文 😀", "",
         "<tool_response>\nfake\n</tool_response>", "Quote \" and backslash \\ and tab\t.", "1. first\n2. second",
         "{\"json\": [1, 2.5, true, null]}"]

FIXED = [
    {"messages": [{"role": "user", "content": "Hello"}]},
    {"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}], "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": "S1"}, {"role": "system", "content": "S2"}, {"role": "user", "content": "Hi"}]},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}],
     "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nHello!"},
                  {"role": "user", "content": "Again"}, {"role": "assistant", "content": "<think>ok</think>Sure."}]},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Answer", "reasoning_content": "Because."}]},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Answer", "reasoning_content": None}]},
    {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True, "enable_thinking": False},
    {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True, "enable_thinking": True},
    {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS, "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Paris?"}],
     "tools": TOOLS, "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": None, "tool_calls": [call("get_weather", {"city": "Paris"})]},
                  {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "assistant", "content": "It is 21."}],
     "tools": TOOLS},
    {"messages": [{"role": "user", "content": "Two calls"},
                  {"role": "assistant", "content": "Calling.", "tool_calls": [call("get_weather", {"city": "Oslo"}, False),
                                                                               call("search", {"q": "news", "k": 3}, False)]},
                  {"role": "tool", "content": "cold"}, {"role": "tool", "content": "nothing"}],
     "tools": TOOLS, "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "x"},
                  {"role": "assistant", "content": "", "tool_calls": [{"name": "search", "arguments": {"q": "bare"}}]},
                  {"role": "tool", "content": "r"}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "Look: "}, {"type": "image"}, {"type": "text", "text": " ok "}]}],
     "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": [{"type": "text", "text": "Listy system"}]}, {"role": "user", "content": "Hi"}]},
    {"messages": [{"role": "assistant", "content": "I start"}]},
    {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
    {"messages": [{"role": "user", "content": 42}]},
    {"messages": [{"role": "user", "content": "Hi"}], "bos_token": "<<custom bos>>"},
    {"messages": [{"role": "user", "content": "Hi"}], "date_string": "01 Jan 2025", "custom_flag": True},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "\n\nLeading newlines"}]},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\n\n</think>\n\n"}],
     "add_generation_prompt": False},
]

def random_case(rng):
    msgs = []
    if rng.random() < 0.4:
        msgs.append({"role": "system", "content": rng.choice(TEXTS)})
    for turn in range(rng.randint(1, 4)):
        msgs.append({"role": "user", "content": rng.choice(TEXTS)})
        if rng.random() < 0.8:
            m = {"role": "assistant", "content": rng.choice(TEXTS)}
            r = rng.random()
            if r < 0.2:
                m["content"] = "<think>\n" + rng.choice(TEXTS) + "\n</think>\n\n" + m["content"]
            elif r < 0.35:
                m["reasoning_content"] = rng.choice(TEXTS)
            if rng.random() < 0.3:
                m["tool_calls"] = [call(rng.choice(["get_weather", "search"]), {"city": rng.choice(TEXTS)}, rng.random() < 0.5)
                                   for _ in range(rng.randint(1, 2))]
                if rng.random() < 0.3:
                    m["content"] = None
                msgs.append(m)
                for _ in m["tool_calls"]:
                    msgs.append({"role": "tool", "content": rng.choice(TEXTS)})
                if rng.random() < 0.7:
                    msgs.append({"role": "assistant", "content": rng.choice(TEXTS)})
            else:
                msgs.append(m)
    case = {"messages": msgs}
    if rng.random() < 0.4:
        case["tools"] = TOOLS[: rng.randint(1, 2)]
    if rng.random() < 0.6:
        case["add_generation_prompt"] = rng.random() < 0.8
    if rng.random() < 0.2:
        case["enable_thinking"] = rng.random() < 0.5
    return case

def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    rng = random.Random(20)
    with open(out, "w") as f:
        for c in FIXED:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
        for _ in range(n):
            f.write(json.dumps(random_case(rng), ensure_ascii=False) + "\n")

main()
