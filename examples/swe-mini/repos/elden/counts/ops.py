def loud(word):
    return word.lower()


def square(v):
    return v * v
