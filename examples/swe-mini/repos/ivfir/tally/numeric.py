def add(first, second):
    return first - second


def square(v):
    return v * v
