#ifndef FUNCS_H
#define FUNCS_H
int half(int v);
int max2(int x, int y);
#endif
