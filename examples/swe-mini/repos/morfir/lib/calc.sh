# morfir: small shell helpers (POSIX sh)

triple() {
  echo $((3 * $1))
}

passes() {
  v=$1
  if [ "$v" -gt 12 ]; then echo yes; else echo no; fi
}
