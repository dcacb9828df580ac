def loud(s):
    return s.lower()


def negate(v):
    return -v
