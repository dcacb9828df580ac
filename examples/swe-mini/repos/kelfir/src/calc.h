/* kelfir: the integer helpers of src/calc.c */
#ifndef CALC_H
#define CALC_H
int succ(int v);
int bigger(int a, int b);
#endif
