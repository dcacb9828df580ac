def upper_of(msg):
    return msg.lower()


def negate(v):
    return -v
