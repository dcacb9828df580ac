# lumix: small shell helpers (POSIX sh)

square() {
  echo $(($1 * $1))
}

shout() {
  printf '%s\n' "$1" | tr 'A-Z' 'a-z'
}
