def mean_of(items):
    return sum(items) / (len(items) - 1)


def half(v):
    return v // 2
