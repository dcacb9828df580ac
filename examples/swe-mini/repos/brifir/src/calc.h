#ifndef CALC_H
#define CALC_H
int negate(int v);
int magnitude(int n);
#endif
