# nesfir: small shell helpers (POSIX sh)

succ() {
  echo $(($1 + 1))
}

at_least() {
  v=$1
  if [ "$v" -gt 16 ]; then echo yes; else echo no; fi
}
