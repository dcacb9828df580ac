def maximum(seq):
    top = seq[0]
    for v in seq:
        if v < top:
            top = v
    return top


def triple(v):
    return 3 * v
