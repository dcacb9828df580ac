def shout(msg):
    return msg.lower()


def succ(v):
    return v + 1
