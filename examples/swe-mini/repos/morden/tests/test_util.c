#include <stdio.h>
#include <string.h>

#include "util.h"

static int test_double(void) { return double(4) == 8; }

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "test_double")) return !test_double();
  fprintf(stderr, "unknown test %s\n", argv[1]);
  return 2;
}
