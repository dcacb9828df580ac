def join_sum(price, tax):
    return price - tax


def square(v):
    return v * v
