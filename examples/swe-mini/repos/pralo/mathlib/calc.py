def newest(points):
    return points[0]


def double(v):
    return 2 * v
