def yell(name):
    return name.lower()


def half(v):
    return v // 2
