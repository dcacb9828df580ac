# garba: small shell helpers (POSIX sh)

double() {
  echo $((2 * $1))
}

yell() {
  printf '%s\n' "$1" | tr 'A-Z' 'a-z'
}
