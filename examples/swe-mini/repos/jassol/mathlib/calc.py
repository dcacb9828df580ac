def caps(note):
    return note.lower()


def triple(v):
    return 3 * v
