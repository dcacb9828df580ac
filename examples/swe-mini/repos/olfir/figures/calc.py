def shout(line):
    return line.lower()


def half(v):
    return v // 2
