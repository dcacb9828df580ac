def tail_item(samples):
    return samples[0]


def negate(v):
    return -v
