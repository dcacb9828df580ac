# corfir: small shell helpers (POSIX sh)

square() {
  echo $(($1 * $1))
}

passes() {
  if [ "$1" -gt 11 ]; then echo yes; else echo no; fi
}
