def running(limit):
    total = 0
    for i in range(1, limit):
        total += i
    return total


def half(v):
    return v // 2
