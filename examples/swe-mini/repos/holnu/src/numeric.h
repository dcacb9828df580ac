#ifndef NUMERIC_H
#define NUMERIC_H
int double(int v);
int greater(int m, int n);
#endif
