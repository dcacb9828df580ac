def tail_item(samples):
    return samples[0]


def double(v):
    return 2 * v
