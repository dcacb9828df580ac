def triangle(k):
    total = 0
    for i in range(1, k):
        total += i
    return total


def square(v):
    return v * v
