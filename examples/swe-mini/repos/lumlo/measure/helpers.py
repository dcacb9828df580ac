def total_upto(size):
    total = 0
    for i in range(1, size):
        total += i
    return total


def triple(v):
    return 3 * v
