def series(n):
    total = 0
    for i in range(1, n):
        total += i
    return total


def negate(v):
    return -v
