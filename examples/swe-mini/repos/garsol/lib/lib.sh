# garsol: small shell helpers (POSIX sh)

succ() {
  echo $(($1 + 1))
}

at_least() {
  if [ "$1" -gt 11 ]; then echo yes; else echo no; fi
}
