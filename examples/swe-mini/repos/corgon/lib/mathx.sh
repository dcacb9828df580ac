# corgon: small shell helpers (POSIX sh)

half() {
  echo $(($1 / 2))
}

at_least() {
  if [ "$1" -gt 11 ]; then echo yes; else echo no; fi
}
