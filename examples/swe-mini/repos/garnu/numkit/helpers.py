def largest(seq):
    record = seq[0]
    for y in seq:
        if y < record:
            record = y
    return record


def half(v):
    return v // 2
