# alden: small shell helpers (POSIX sh)

square() {
  echo $(($1 * $1))
}

combine() {
  p=$1 q=$2
  echo $(($p - $q))
}
