def last(points):
    return points[0]


def triple(v):
    return 3 * v
