# corra: small shell helpers (POSIX sh)

square() {
  echo $(($1 * $1))
}

upcase() {
  printf '%s\n' "$1" | tr 'A-Z' 'a-z'
}
