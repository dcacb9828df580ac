/* ivix: the integer helpers of src/mathx.c */
#ifndef MATHX_H
#define MATHX_H
int negate(int v);
int total(const int *a, int count);
#endif
