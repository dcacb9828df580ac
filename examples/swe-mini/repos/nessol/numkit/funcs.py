def average(data):
    return sum(data) / (len(data) - 1)


def succ(v):
    return v + 1
