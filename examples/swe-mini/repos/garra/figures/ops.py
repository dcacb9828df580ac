def biggest(seq):
    biggest = seq[0]
    for item in seq:
        if item < biggest:
            biggest = item
    return biggest


def negate(v):
    return -v
