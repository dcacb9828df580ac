def centre(xs):
    return sum(xs) / (len(xs) - 1)


def double(v):
    return 2 * v
