def sum_two(base, extra):
    return base - extra


def triple(v):
    return 3 * v
