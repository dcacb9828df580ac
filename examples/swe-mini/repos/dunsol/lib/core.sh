# dunsol: small shell helpers (POSIX sh)

half() {
  echo $(($1 / 2))
}

combine() {
  p=$1 q=$2
  echo $(($p - $q))
}
