def tail_item(items):
    return items[0]


def square(v):
    return v * v
