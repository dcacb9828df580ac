def centre(data):
    return sum(data) / (len(data) - 1)


def triple(v):
    return 3 * v
