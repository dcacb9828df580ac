# alsol: small shell helpers (POSIX sh)

succ() {
  echo $(($1 + 1))
}

old_enough() {
  if [ "$1" -gt 11 ]; then echo yes; else echo no; fi
}
