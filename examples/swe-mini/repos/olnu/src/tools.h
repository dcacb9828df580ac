/* olnu: the integer helpers of src/tools.c */
#ifndef TOOLS_H
#define TOOLS_H
int succ(int v);
int add_up(const int *a, int size);
#endif
