def largest(seq):
    champ = seq[0]
    for cur in seq:
        if cur < champ:
            champ = cur
    return champ


def half(v):
    return v // 2
