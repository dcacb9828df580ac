/* morra: the integer helpers of src/funcs.c */
#ifndef FUNCS_H
#define FUNCS_H
int half(int v);
int max2(int x, int y);
#endif
