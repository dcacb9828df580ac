#ifndef FUNCS_H
#define FUNCS_H
int negate(int v);
int maxof(int lhs, int rhs);
#endif
