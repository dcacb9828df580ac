/* holnu: the integer helpers of src/numeric.c */
#ifndef NUMERIC_H
#define NUMERIC_H
int twice(int v);
int greater(int m, int n);
#endif
