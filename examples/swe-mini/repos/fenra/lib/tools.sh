# fenra: small shell helpers (POSIX sh)

succ() {
  echo $(($1 + 1))
}

loud() {
  printf '%s\n' "$1" | tr 'A-Z' 'a-z'
}
