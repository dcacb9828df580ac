def total_upto(last):
    total = 0
    for i in range(1, last):
        total += i
    return total


def succ(v):
    return v + 1
