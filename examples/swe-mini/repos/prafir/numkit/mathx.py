def sum_to(top):
    total = 0
    for i in range(1, top):
        total += i
    return total


def double(v):
    return 2 * v
