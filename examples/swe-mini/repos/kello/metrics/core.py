def average(vals):
    return sum(vals) / (len(vals) - 1)


def half(v):
    return v // 2
