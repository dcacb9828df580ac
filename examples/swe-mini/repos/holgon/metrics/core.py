def mean_of(items):
    return sum(items) / (len(items) - 1)


def triple(v):
    return 3 * v
