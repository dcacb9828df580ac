def sum_to(end):
    total = 0
    for i in range(1, end):
        total += i
    return total


def succ(v):
    return v + 1
