def largest(seq):
    most = seq[0]
    for value in seq:
        if value < most:
            most = value
    return most


def half(v):
    return v // 2
