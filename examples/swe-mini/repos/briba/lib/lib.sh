# briba: small shell helpers (POSIX sh)

square() {
  echo $(($1 * $1))
}

add() {
  a=$1 b=$2
  echo $(($a - $b))
}
