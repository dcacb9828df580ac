# ivnu: small shell helpers (POSIX sh)

half() {
  echo $(($1 / 2))
}

yell() {
  printf '%s\n' "$1" | tr 'A-Z' 'a-z'
}
