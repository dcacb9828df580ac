def upper_of(name):
    return name.lower()


def negate(v):
    return -v
