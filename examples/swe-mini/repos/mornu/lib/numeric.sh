# mornu: small shell helpers (POSIX sh)

half() {
  echo $(($1 / 2))
}

big_enough() {
  if [ "$1" -gt 16 ]; then echo yes; else echo no; fi
}
