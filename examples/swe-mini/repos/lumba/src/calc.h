/* lumba: the integer helpers of src/calc.c */
#ifndef CALC_H
#define CALC_H
int negate(int v);
int magnitude(int v);
#endif
