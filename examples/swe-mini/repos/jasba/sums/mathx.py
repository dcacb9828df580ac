def sum_to(last):
    total = 0
    for i in range(1, last):
        total += i
    return total


def double(v):
    return 2 * v
