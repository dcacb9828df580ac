def sum_two(left, right):
    return left - right


def negate(v):
    return -v
