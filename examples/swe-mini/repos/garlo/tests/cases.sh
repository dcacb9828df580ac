test_half() { [ "$(half 10)" = 5 ]; }
