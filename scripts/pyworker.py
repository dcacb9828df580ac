#!/usr/bin/env python3
"""A minimal third-party longtail worker, written from docs/protocol.md alone
(it shares no code with longtail): it answers every TASK with a short made-up
completion. It exists to check that the protocol documentation is enough to
interoperate, and, with --token or --reward, to play a hostile worker whose
every result holds that token id or reward (the chaos scenario hostile_worker
sends a token past the vocabulary and a reward the domain cannot produce).

  scripts/pyworker.py --connect tcp://127.0.0.1:5555 [--name py] [--slots 2] [--token ID] [--reward R]

Needs pyzmq (Debian: python3-zmq)."""
import argparse, json, os, random, socket, struct, sys, time

import zmq

p = argparse.ArgumentParser()
p.add_argument("--connect", required=True)
p.add_argument("--name", default="pyworker")
p.add_argument("--slots", type=int, default=2)
p.add_argument("--token", type=int, default=None, help="put this token id in every result (hostile)")
p.add_argument("--reward", type=float, default=0.0, help="the reward of every ok result (hostile outside [0, 1])")
p.add_argument("--seconds", type=float, default=0, help="leave (BYE) after this long (0: until BYE)")
a = p.parse_args()

ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
s.setsockopt(zmq.LINGER, 1000)
s.setsockopt_string(zmq.ROUTING_ID, a.name)  # the same identity across reconnects
s.connect(a.connect)
seq = 0
spool = {}       # task_id -> frames of a finished TRAJ, kept until ACKed (at-least-once)
welcome = None
log = lambda *x: print(a.name + ":", *x, file=sys.stderr, flush=True)


def send(header, arrays=()):
    """Frame 0: the JSON header; then one little-endian frame per `frames` entry."""
    global seq
    seq += 1
    header = dict(header, v=1, id=seq)
    if arrays:
        header["frames"] = [{"name": n, "dtype": d, "count": len(v)} for n, d, v in arrays]
    fmt = {"i32": "i", "f32": "f", "u8": "B", "u16": "H"}
    parts = [json.dumps(header).encode()] + [struct.pack("<%d%s" % (len(v), fmt[d]), *v) for _, d, v in arrays]
    s.send_multipart(parts)
    return parts


def hello():
    send({"type": "HELLO", "name": a.name, "slots": a.slots, "backend": "python", "device": "cpu",
          "host": socket.gethostname(), "pid": os.getpid(), "policy_version": -1, "pending": list(spool)})


def trajectory(task, status="ok", reason="stop"):
    vocab = welcome["model"]["vocab_size"]
    eos = welcome["model"]["eos_ids"]
    prompt = [random.randrange(vocab) for _ in range(4)]
    gen = [random.randrange(256) for _ in range(6)] + eos[:1]
    if a.token is not None:
        gen[0] = a.token
    n = len(prompt) + len(gen)
    mask = [0] * len(prompt) + [1] * len(gen)
    h = {"type": "TRAJ", "task_id": task["task_id"], "group_id": task["group_id"], "domain": task.get("domain", ""),
         "status": status, "finish": "terminated" if status == "ok" else "none", "reason": reason, "error": "",
         "components": {}, "turns": 1, "eval": task.get("eval", False), "gen_ms": 1, "env_ms": 0, "reward_ms": 0,
         "messages": [{"role": "assistant", "content": "0"}]}
    if status == "ok":
        h["reward"] = a.reward
    arrays = [("tokens", "i32", prompt + gen), ("logprobs", "f32", [0.0] * len(prompt) + [-1.0] * len(gen)),
              ("loss_mask", "u8", mask), ("versions", "i32", [-1] * len(prompt) + [task["policy_version"]] * len(gen))]
    return h, arrays


hello()
last_beat = last_heard = time.time()
start = time.time()
while True:
    if a.seconds and time.time() - start > a.seconds:
        send({"type": "BYE", "reason": "done"})
        break
    if welcome and time.time() - last_beat >= welcome["heartbeat_ms"] / 1000:
        send({"type": "HEARTBEAT", "t_ms": int(time.time() * 1000), "inflight": 0, "slots": a.slots,
              "policy_version": -1, "unacked": len(spool)})
        last_beat = time.time()
    if welcome and time.time() - last_heard > welcome["heartbeat_ms"] * welcome["liveness"] / 1000:
        hello()  # the daemon is silent: say HELLO again (it may have restarted)
        last_heard = time.time()
    if not s.poll(50):
        continue
    frames = s.recv_multipart()
    last_heard = time.time()
    m = json.loads(frames[0])
    t = m["type"]
    if t == "WELCOME":
        welcome = m
        for parts in spool.values():  # resend what was never acknowledged
            s.send_multipart(parts)
    elif t == "TASK":
        h, arrays = trajectory(m)
        spool[m["task_id"]] = send(h, arrays)
    elif t == "ACK":
        for tid in m["task_ids"]:
            spool.pop(tid, None)
    elif t == "ABORT":
        pass  # sessions end at once here: their TRAJ is already sent
    elif t == "ERROR":
        if m.get("task_id"):
            spool.pop(m["task_id"], None)  # refused for good: never resend
            log("refused:", m["message"])
        elif m["code"] == -6:
            hello()  # the daemon does not know us
    elif t == "BYE":
        break
s.close()
ctx.term()
