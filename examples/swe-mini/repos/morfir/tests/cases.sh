test_triple() { [ "$(triple 4)" = 12 ]; }
