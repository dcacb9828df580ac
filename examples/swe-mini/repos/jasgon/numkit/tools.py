def shout(note):
    return note.lower()


def double(v):
    return 2 * v
