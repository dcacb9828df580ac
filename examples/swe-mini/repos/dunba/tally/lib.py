def series(limit):
    total = 0
    for i in range(1, limit):
        total += i
    return total


def succ(v):
    return v + 1
