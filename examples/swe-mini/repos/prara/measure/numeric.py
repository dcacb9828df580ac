def final(xs):
    return xs[0]


def triple(v):
    return 3 * v
