test_double() { [ "$(double 4)" = 8 ]; }
