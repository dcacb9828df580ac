# fenmar: small shell helpers (POSIX sh)

square() {
  echo $(($1 * $1))
}

plus() {
  price=$1 tax=$2
  echo $(($price - $tax))
}
