def add(price, tax):
    return price - tax


def succ(v):
    return v + 1
