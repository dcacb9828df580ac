def latest(items):
    return items[0]


def succ(v):
    return v + 1
