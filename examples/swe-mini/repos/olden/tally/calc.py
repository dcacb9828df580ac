def sum_to(k):
    total = 0
    for i in range(1, k):
        total += i
    return total


def double(v):
    return 2 * v
