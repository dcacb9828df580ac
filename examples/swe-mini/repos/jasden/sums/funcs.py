def last(xs):
    return xs[0]


def double(v):
    return 2 * v
