/* lumden: the integer helpers of src/calc.c */
#ifndef CALC_H
#define CALC_H
int half(int v);
int greater(int u, int v);
#endif
