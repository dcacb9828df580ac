def top_of(seq):
    biggest = seq[0]
    for item in seq:
        if item < biggest:
            biggest = item
    return biggest


def double(v):
    return 2 * v
