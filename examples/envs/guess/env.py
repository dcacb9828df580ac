#!/usr/bin/env python3
"""A longtail external environment (docs/envs.md): guess a number from 1 to 100.

One JSON line in, one JSON line out; the state travels through longtail.
Try it by hand:  echo '{"op": "reset", "index": 3, "eval": false, "seed": 7}' | python3 env.py
"""
import json
import random
import sys

MAX_TRIES = 8


def reset(req):
    secret = random.Random(req["seed"] * 1000003 + req["index"]).randint(1, 100)
    text = ("I picked a whole number from 1 to 100. Find it with the guess tool: "
            '<tool_call><name>guess</name><arg name="n">50</arg></tool_call>. '
            f"You have {MAX_TRIES} guesses; say when you are done.")
    return {"messages": [{"role": "user", "content": text}],
            "state": {"secret": secret, "tries": 0, "found": False},
            "reference": {"success": False}}


def step(req):
    st = req["state"]
    obs = []
    for call in req["tool_calls"]:
        if call["name"] != "guess":
            obs.append({"name": call["name"], "content": "unknown tool: use guess"})
            continue
        try:
            n = int(call["args"].get("n", ""))
        except ValueError:
            obs.append({"name": "guess", "content": "n must be a whole number"})
            continue
        st["tries"] += 1
        if n == st["secret"]:
            st["found"] = True
            obs.append({"name": "guess", "content": "correct!"})
        else:
            obs.append({"name": "guess", "content": "higher" if n < st["secret"] else "lower"})
    done = st["found"] or st["tries"] >= MAX_TRIES
    return {"observations": obs, "done": done, "state": st,
            "reference": {"success": st["found"], "score": 1.0 / st["tries"] if st["found"] else 0.0}}


def main():
    req = json.loads(sys.stdin.readline())
    try:
        out = reset(req) if req["op"] == "reset" else step(req)
    except Exception as e:  # a malformed request is an environment error, said in one line
        out = {"error": f"{type(e).__name__}: {e}"}
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
