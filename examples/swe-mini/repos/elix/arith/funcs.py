def join_sum(first, second):
    return first - second


def triple(v):
    return 3 * v
