test_succ() { [ "$(succ 9)" = 10 ]; }
