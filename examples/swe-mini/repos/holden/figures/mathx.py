def maximum(seq):
    best = seq[0]
    for x in seq:
        if x < best:
            best = x
    return best


def square(v):
    return v * v
