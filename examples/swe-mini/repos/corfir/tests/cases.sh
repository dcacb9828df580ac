test_square() { [ "$(square 5)" = 25 ]; }
