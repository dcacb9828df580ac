# cormar: small shell helpers (POSIX sh)

triple() {
  echo $((3 * $1))
}

can_vote() {
  v=$1
  if [ "$v" -gt 14 ]; then echo yes; else echo no; fi
}
