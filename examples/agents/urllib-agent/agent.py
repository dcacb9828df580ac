#!/usr/bin/env python3
"""A minimal agent program for an `agent` domain (docs/agent-gateway.md), using
only Python's standard library.  longtail starts it once per episode with
OPENAI_BASE_URL, OPENAI_API_KEY and LONGTAIL_TASK set; it asks the policy, asks
it to check itself, and exits 0.  It prints no reward, so the domain's reward
(`rewards`) judges the final answer against the row's `answer`."""
import json
import os
import urllib.request

task = json.loads(os.environ["LONGTAIL_TASK"])  # the same row arrives on stdin


def chat(messages):
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                                 data=json.dumps({"model": "any", "messages": messages}).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    with urllib.request.urlopen(req, timeout=300) as r:
        # an untrained policy writes arbitrary bytes: decode leniently
        return json.loads(r.read().decode("utf-8", "replace"))["choices"][0]["message"]["content"]


messages = list(task["messages"])
messages.append({"role": "assistant", "content": chat(messages)})
messages.append({"role": "user", "content": "Check your work, then end with #### and the final number."})
print(chat(messages))
