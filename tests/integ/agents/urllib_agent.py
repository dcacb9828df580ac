#!/usr/bin/env python3
"""An agent program that knows only the OpenAI API, through the standard
library (urllib): the agent gateway's test (tests/integ/test_agent_gateway.c).

    urllib_agent.py LOGFILE [MODE]

It reads its task from stdin (and checks LONGTAIL_TASK says the same), holds a
three-call conversation with the policy, then compacts its history (a fourth
call that does not repeat the earlier turns: a new context), appends one JSON line per answered
call to LOGFILE ({"key", "prompt", "content", "completion_tokens"}) and prints
{"reward": 0.5}.  MODE makes it misbehave: crash (exit 3 after a call), hang
(sleep after a call), garbage (malformed and unauthenticated requests first,
each logged with the status it got), stale (a call with the key of an episode
that already ended, and one with the key of an episode still running, each
logged with its status; hanging agents list their keys in LOGFILE.live as
they start, finishing ones in LOGFILE.ended), temp (every call asks for temperature 0.5, then
one asks for 0.9, logged with its status), late_hang (4 s before its first call, then hang).  For a sandboxed run (no host files): a LOGFILE
starting with "-" means stderr (the rest of it is only a tag for pgrep); MODE probe:PORT first
tries the host's 127.0.0.1:PORT and the internet and exits 7 if either answers; MODE hang_setsid
starts a sleeper in a session of its own, then hangs.  MODE crash_stdout writes its error to stdout and exits 1
before any call, as `claude -p` does; alloc:MB holds MB of memory, then goes on as normal; messages holds the
conversation over Anthropic's Messages API instead, at ANTHROPIC_BASE_URL/v1/messages with ANTHROPIC_API_KEY
(logging usage.output_tokens as completion_tokens).
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

BASE = os.environ["OPENAI_BASE_URL"]
KEY = os.environ["OPENAI_API_KEY"]
LOG = sys.argv[1]
MODE = sys.argv[2] if len(sys.argv) > 2 else "normal"


def log(rec):
    if LOG.startswith("-"):
        print(json.dumps(rec), file=sys.stderr)
        return
    with open(LOG, "a") as f:  # one write per line: whole lines even with several agents
        f.write(json.dumps(rec) + "\n")


def note_key(suffix, line):
    if not LOG.startswith("-"):
        with open(LOG + suffix, "a") as f:
            f.write(line)


def post(path, body, key=KEY, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method="POST")
    req.add_header("Content-Type", "application/json")
    if key is not None:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


row = json.loads(sys.stdin.readline())
env_row = json.loads(os.environ["LONGTAIL_TASK"])
assert row == env_row, "stdin and LONGTAIL_TASK differ"
assert "answer" not in row, "the answer reached the policy's side"
prompt = row["messages"][-1]["content"]
if MODE == "crash_stdout":
    print("Invalid API key · Please run /login")
    sys.exit(1)
if MODE.startswith("alloc:"):
    held = "x" * (int(MODE[6:]) << 20)  # touched: resident, not only reserved
    MODE = "normal"
if MODE == "late_hang":  # a start-up longer than its timeout_s (3 s), then a hang: start-up is not the policy's time
    time.sleep(4)
    MODE = "hang"
if MODE == "hang":  # its episode runs until timeout_s (3 s) kills it: the key another's call borrows
    note_key(".live", "%s %.3f\n" % (KEY, time.time()))
if MODE.startswith("probe:"):
    import socket
    for host, port in (("127.0.0.1", int(MODE[6:])), ("1.1.1.1", 80)):
        try:
            socket.create_connection((host, port), 2)
            print("reached %s:%d from the sandbox" % (host, port), file=sys.stderr)
            sys.exit(7)
        except OSError:
            pass
if MODE == "hang_setsid":
    import subprocess
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", "urllib_agent.py", LOG], start_new_session=True)
    MODE = "hang"


def keys(suffix):
    try:
        with open(LOG + suffix) as f:
            return [k.strip() for k in f if k.strip() and k.strip() != KEY]
    except FileNotFoundError:
        return []


if MODE == "garbage":
    for what, key, raw in [("no_key", None, None), ("bad_key", "lt-not-a-key", None), ("bad_json", KEY, b"{not json"),
                           ("no_messages", KEY, json.dumps({"model": "x"}).encode())]:
        status, body = post("/chat/completions", {"model": "x", "messages": row["messages"]}, key=key, raw=raw)
        log({"garbage": what, "status": status, "error": body.get("error", {}).get("message", "")})
if MODE == "stale":
    old = keys(".ended")
    if old:
        time.sleep(2)  # its program wrote the key just before exiting: let the episode end
    for k in old[:1]:
        status, body = post("/chat/completions", {"model": "x", "messages": row["messages"]}, key=k)
        log({"stale": k, "status": status, "error": body.get("error", {}).get("message", "")})
    dead = set()
    for _ in range(100):  # a hanging episode started under 2 s ago is still running: its key on this URL
        live = [k.split()[0] for k in keys(".live") if time.time() - float(k.split()[1]) < 2 and k.split()[0] not in dead]
        if live:
            status, body = post("/chat/completions", {"model": "x", "messages": row["messages"]}, key=live[-1])
            error = body.get("error", {}).get("message", "")
            if status == 401 and "no live episode" in error:  # it ended between the look and the call (a loaded
                dead.add(live[-1])                             # machine): another one, not a verdict
                continue
            log({"foreign": live[-1], "status": status, "error": error})
            break
        time.sleep(0.1)
def messages_call(body):
    """One call of Anthropic's Messages API, answered in the chat completions' shape this agent logs."""
    req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", data=json.dumps(body).encode(),
                                 method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("x-api-key", os.environ["ANTHROPIC_API_KEY"])
    req.add_header("anthropic-version", "2023-06-01")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            m = json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
    text = "".join(b["text"] for b in m["content"] if b["type"] == "text")
    return 200, {"choices": [{"message": {"content": text}}], "usage": {"completion_tokens": m["usage"]["output_tokens"]}}


def chat(body):
    """The conversation's next call, over the API the mode speaks."""
    if MODE == "messages":
        return messages_call({"model": "claude-x", "max_tokens": 32000, "messages": body["messages"]})
    return post("/chat/completions", body)


TEMP = {"temperature": 0.5} if MODE == "temp" else {}
messages = list(row["messages"])
for turn in range(3):
    status, body = chat({"model": "my-agent-model", "messages": messages, "max_tokens": 32000, **TEMP})
    if status != 200:
        log({"key": KEY, "prompt": prompt, "error_status": status, "error": body})
        break
    msg = body["choices"][0]["message"]
    log({"key": KEY, "prompt": prompt, "content": msg["content"], "completion_tokens": body["usage"]["completion_tokens"]})
    if MODE == "crash":
        sys.exit(3)
    if MODE == "hang":
        time.sleep(3600)
    messages.append({"role": "assistant", "content": msg["content"]})
    messages.append({"role": "user", "content": "Go on (%d)." % turn})
else:  # the history compacted: the earlier turns are not repeated
    compact = list(row["messages"]) + [{"role": "user", "content": "You said %d things. Answer now." % turn}]
    status, body = chat({"model": "my-agent-model", "messages": compact, **TEMP})
    if status == 200:
        log({"key": KEY, "prompt": prompt, "content": body["choices"][0]["message"]["content"],
             "completion_tokens": body["usage"]["completion_tokens"]})
    else:
        log({"key": KEY, "prompt": prompt, "error_status": status, "error": body})
if MODE == "temp":
    status, body = post("/chat/completions", {"model": "x", "messages": compact, "temperature": 0.9})
    log({"temp_change": status, "error": body.get("error", {}).get("message", "")})
note_key(".ended", KEY + "\n")  # the episode ends with this program: its key is dead from now on
print("thinking out loud on stdout is fine")
print(json.dumps({"reward": 0.5}))
