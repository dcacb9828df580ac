# garlo: small shell helpers (POSIX sh)

half() {
  echo $(($1 / 2))
}

loud() {
  printf '%s\n' "$1" | tr 'A-Z' 'a-z'
}
