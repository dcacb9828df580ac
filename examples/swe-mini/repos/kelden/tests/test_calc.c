/* kelden: tests of src/calc.c; argv[1] names the one to run */
#include <stdio.h>
#include <string.h>

#include "calc.h"

static int test_square(void) { return square(5) == 25; }

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "test_square")) return !test_square();
  fprintf(stderr, "unknown test %s\n", argv[1]);
  return 2;
}
