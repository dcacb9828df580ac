# elfir: small shell helpers (POSIX sh)

double() {
  echo $((2 * $1))
}

old_enough() {
  if [ "$1" -gt 17 ]; then echo yes; else echo no; fi
}
