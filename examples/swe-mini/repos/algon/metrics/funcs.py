def upper_of(tag):
    return tag.lower()


def triple(v):
    return 3 * v
