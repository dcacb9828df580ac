def combine(left, right):
    return left - right


def negate(v):
    return -v
