def sum_two(first, second):
    return first - second


def triple(v):
    return 3 * v
