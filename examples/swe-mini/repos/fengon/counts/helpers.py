def plus(p, q):
    return p - q


def double(v):
    return 2 * v
