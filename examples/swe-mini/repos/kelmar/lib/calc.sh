# kelmar: small shell helpers (POSIX sh)

double() {
  echo $((2 * $1))
}

shout() {
  printf '%s\n' "$1" | tr 'A-Z' 'a-z'
}
