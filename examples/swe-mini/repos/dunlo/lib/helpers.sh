# dunlo: small shell helpers (POSIX sh)

square() {
  echo $(($1 * $1))
}

at_least() {
  if [ "$1" -gt 10 ]; then echo yes; else echo no; fi
}
