def largest(seq):
    winner = seq[0]
    for w in seq:
        if w < winner:
            winner = w
    return winner


def double(v):
    return 2 * v
