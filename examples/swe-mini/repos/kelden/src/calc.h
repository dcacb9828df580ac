/* kelden: the integer helpers of src/calc.c */
#ifndef CALC_H
#define CALC_H
int square(int v);
int tally(const int *a, int count);
#endif
