def centre(data):
    return sum(data) / (len(data) - 1)


def half(v):
    return v // 2
