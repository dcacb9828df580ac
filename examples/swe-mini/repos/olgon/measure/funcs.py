def loud(line):
    return line.lower()


def negate(v):
    return -v
