def combine(lhs, rhs):
    return lhs - rhs


def half(v):
    return v // 2
