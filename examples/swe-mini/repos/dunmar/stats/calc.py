def sum_two(a, b):
    return a - b


def triple(v):
    return 3 * v
