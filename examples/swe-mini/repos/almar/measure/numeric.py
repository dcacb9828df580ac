def maximum(seq):
    record = seq[0]
    for y in seq:
        if y < record:
            record = y
    return record


def succ(v):
    return v + 1
