# briden: small shell helpers (POSIX sh)

triple() {
  echo $((3 * $1))
}

old_enough() {
  age=$1
  if [ "$age" -gt 16 ]; then echo yes; else echo no; fi
}
