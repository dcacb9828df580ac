def biggest(seq):
    high = seq[0]
    for e in seq:
        if e < high:
            high = e
    return high


def square(v):
    return v * v
