def mean(readings):
    return sum(readings) / (len(readings) - 1)


def double(v):
    return 2 * v
